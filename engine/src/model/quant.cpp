// 4-bit blocks: NF4 quantization, GGUF Q4_0/Q4_1/Q4_K/Q8_0 blocks taken over, dequantization.
// The multiply lives in linear_q4.cpp.
#include "kev/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include "half.h"
#include "kev/error.h"
#include "model/quant_blocks.h"

namespace kev {

// bitsandbytes' NF4 table (QLoRA, appendix E): the 2^4 quantiles of a standard
// normal, normalised so the extremes are -1 and 1, with 0 represented exactly.
const std::array<float, 16> kNf4Codebook = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};

namespace {

std::array<float, 16> lut_of(QuantFormat f) {
    std::array<float, 16> lut{};
    for (int i = 0; i < 16; ++i) {
        switch (f) {
            case QuantFormat::NF4: lut[i] = kNf4Codebook[i]; break;
            case QuantFormat::Q4_0: lut[i] = static_cast<float>(i - 8); break;
            case QuantFormat::Q4_1:
            case QuantFormat::Q4_K: lut[i] = static_cast<float>(i); break;
            case QuantFormat::Q8_0: case QuantFormat::Q6_K: case QuantFormat::Q5_K: break;  // byte codes: the code is the value
        }
    }
    return lut;
}

std::uint16_t to_fp16_bits(float f) { return c10::Half(f).x; }

// Nearest NF4 code of v in [-1, 1]: the codebook is sorted, so compare with midpoints.
int nearest_nf4(float v) {
    int code = 0;
    for (int i = 1; i < 16; ++i) {
        if (v > 0.5f * (kNf4Codebook[i - 1] + kNf4Codebook[i])) code = i;
    }
    return code;
}

}  // namespace

const char* to_string(QuantFormat format) {
    switch (format) {
        case QuantFormat::NF4: return "nf4";
        case QuantFormat::Q4_0: return "q4_0";
        case QuantFormat::Q4_1: return "q4_1";
        case QuantFormat::Q4_K: return "q4_k";
        case QuantFormat::Q8_0: return "q8_0";
        case QuantFormat::Q6_K: return "q6_k";
        case QuantFormat::Q5_K: return "q5_k";
    }
    return "?";
}

std::int64_t QuantMatrix::bytes() const {
    std::int64_t b = static_cast<std::int64_t>(codes.size() + 2 * scales.size() + 2 * mins.size() + sub_scales.size() +
                                               sub_mins.size());
    if (cuda) {
        for (const at::Tensor* t : {&cuda->codes, &cuda->scales, &cuda->mins})
            if (t->defined()) b += static_cast<std::int64_t>(t->nbytes());
    }
    return b;
}

QuantMatrix quantize_nf4(const at::Tensor& weight) {
    if (weight.dim() != 2 || weight.size(1) % 32 != 0 || weight.size(1) == 0)
        throw Error(ErrorCode::InvalidArgument, "quantize_nf4: the weight's rows must be a multiple of 32 long");
    const at::Tensor w = weight.to(at::kCPU, at::kFloat).contiguous();  // [rows, cols]
    QuantMatrix q;
    q.format = QuantFormat::NF4;
    q.rows = w.size(0);
    q.cols = w.size(1);
    q.block = q.cols % 64 == 0 ? 64 : 32;
    q.lut = lut_of(QuantFormat::NF4);
    q.codes.assign(static_cast<std::size_t>(q.rows * q.cols / 2), 0);
    q.scales.assign(static_cast<std::size_t>(q.rows * q.blocks_per_row()), 0);
    const float* src = w.data_ptr<float>();
    at::parallel_for(0, q.rows, 16, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
            for (std::int64_t b = 0; b < q.blocks_per_row(); ++b) {
                const float* x = src + r * q.cols + b * q.block;
                float absmax = 0.0f;
                for (std::int64_t j = 0; j < q.block; ++j) absmax = std::max(absmax, std::fabs(x[j]));
                const std::uint16_t d_bits = to_fp16_bits(absmax);
                q.scales[r * q.blocks_per_row() + b] = d_bits;
                // Normalise by the scale as stored, so the decoded value is the nearest one.
                const float d = fp16_to_float(d_bits);
                const float inv = d > 0.0f ? 1.0f / d : 0.0f;
                std::uint8_t* out = q.codes.data() + (r * q.cols + b * q.block) / 2;
                for (std::int64_t g = 0; g < q.block; g += 32) {
                    for (int j = 0; j < 16; ++j) {
                        const int lo = nearest_nf4(x[g + j] * inv);
                        const int hi = nearest_nf4(x[g + j + 16] * inv);
                        out[g / 2 + j] = static_cast<std::uint8_t>(lo | hi << 4);
                    }
                }
            }
        }
    });
    return q;
}

namespace {

// ggml's Q4_K: per 256 columns fp16 d, fp16 dmin, 12 bytes of eight 6-bit (sc, m) pairs,
// 128 bytes of codes (64-column chunk c: byte 32c + l holds column 64c + l in its low
// nibble and 64c + 32 + l in its high one).
constexpr std::int64_t kQ4KBlockBytes = 144;

// An empty matrix of `format` for rows x cols read from ggml blocks of `unit` columns and
// `block_bytes` bytes: throws InvalidArgument for a row order that is not `rows` source
// rows, Format where the rows are not whole blocks or `nbytes` cannot hold them (`what`
// names the file's type).
QuantMatrix checked_blocks(const char* what, QuantFormat format, std::int64_t rows, std::int64_t cols, std::int64_t unit,
                           std::int64_t block_bytes, std::uint64_t nbytes, const std::vector<std::int64_t>& row_order) {
    if (!row_order.empty() && static_cast<std::int64_t>(row_order.size()) != rows)
        throw Error(ErrorCode::InvalidArgument, "quant_from_ggml: row order of the wrong length");
    for (const std::int64_t src : row_order)
        if (src < 0 || src >= rows) throw Error(ErrorCode::InvalidArgument, "quant_from_ggml: row order out of range");
    if (rows <= 0 || cols <= 0 || cols % unit != 0)
        throw Error(ErrorCode::Format, std::string(what) + " blocks: a row of " + std::to_string(cols) + " is not whole " +
                                           std::to_string(unit) + "-element blocks");
    if (nbytes / static_cast<std::uint64_t>(block_bytes) / static_cast<std::uint64_t>(cols / unit) <
        static_cast<std::uint64_t>(rows))
        throw Error(ErrorCode::Format, std::string(what) + " blocks: the tensor's data is shorter than its shape needs");
    QuantMatrix q;
    q.format = format;
    q.rows = rows;
    q.cols = cols;
    q.block = 32;
    q.lut = lut_of(format);
    return q;
}

// fn(s, r, sb, blk) for every super-block of a K-quant matrix q (already checked by
// checked_blocks): s its index in q's tables, r and sb its row and place in the row, blk
// its bytes in `data`, read from source row row_order[r] (r when empty).
template <typename Fn>
void for_each_superblock(const QuantMatrix& q, const std::uint8_t* data, std::int64_t block_bytes,
                         const std::vector<std::int64_t>& row_order, Fn fn) {
    const std::int64_t spr = q.cols / 256;
    for (std::int64_t r = 0; r < q.rows; ++r) {
        const std::uint8_t* blk = data + (row_order.empty() ? r : row_order[r]) * spr * block_bytes;
        for (std::int64_t sb = 0; sb < spr; ++sb, blk += block_bytes) fn(r * spr + sb, r, sb, blk);
    }
}

// The tables of a Q4_K / Q5_K matrix sized, and super-block s's filled from its header
// blk: fp16 d and dmin, then 12 bytes of eight 6-bit (sc, m) pairs (ggml's get_scale_min_k4).
void size_k4_tables(QuantMatrix& q, std::int64_t superblocks) {
    q.scales.resize(static_cast<std::size_t>(superblocks));
    q.mins.resize(q.scales.size());
    q.sub_scales.resize(static_cast<std::size_t>(superblocks * 8));
    q.sub_mins.resize(q.sub_scales.size());
}
void read_k4_header(QuantMatrix& q, std::int64_t s, const std::uint8_t* blk) {
    q.scales[s] = load_u16(blk);
    q.mins[s] = load_u16(blk + 2);
    const std::uint8_t* sc = blk + 4;
    for (int j = 0; j < 8; ++j) {
        const std::uint8_t d = j < 4 ? sc[j] & 63 : (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
        const std::uint8_t m = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        q.sub_scales[s * 8 + j] = d;
        q.sub_mins[s * 8 + j] = m;
    }
}

QuantMatrix q4k_from_ggml(const std::uint8_t* data, std::uint64_t nbytes, std::int64_t rows, std::int64_t cols,
                          const std::vector<std::int64_t>& row_order) {
    QuantMatrix q = checked_blocks("Q4_K", QuantFormat::Q4_K, rows, cols, 256, kQ4KBlockBytes, nbytes, row_order);
    q.codes.resize(static_cast<std::size_t>(rows * cols / 2));
    size_k4_tables(q, rows * cols / 256);
    for_each_superblock(q, data, kQ4KBlockBytes, row_order, [&](std::int64_t s, std::int64_t r, std::int64_t sb,
                                                                const std::uint8_t* blk) {
        read_k4_header(q, s, blk);
        const std::uint8_t* qs = blk + 16;
        std::uint8_t* out = q.codes.data() + (r * cols + sb * 256) / 2;
        for (int j = 0; j < 8; ++j) {  // block j: chunk j / 2, low nibbles for even j
            const std::uint8_t* src = qs + 32 * (j / 2);
            const int shift = j % 2 ? 4 : 0;
            for (int t = 0; t < 16; ++t) {
                const int lo = (src[t] >> shift) & 0x0f, hi = (src[t + 16] >> shift) & 0x0f;
                out[j * 16 + t] = static_cast<std::uint8_t>(lo | hi << 4);
            }
        }
    });
    return q;
}

// ggml's Q5_K: Q4_K's 16-byte header, 32 bytes qh, 128 bytes of nibbles. Per 64 columns c:
// column 64c + l has the low nibble of qs[32c + l] and bit 2c of qh[l], column 64c + 32 + l
// the high nibble and bit 2c + 1. The codes become bytes 0..31 in column order.
constexpr std::int64_t kQ5KBlockBytes = 176;

QuantMatrix q5k_from_ggml(const std::uint8_t* data, std::uint64_t nbytes, std::int64_t rows, std::int64_t cols,
                          const std::vector<std::int64_t>& row_order) {
    QuantMatrix q = checked_blocks("Q5_K", QuantFormat::Q5_K, rows, cols, 256, kQ5KBlockBytes, nbytes, row_order);
    q.codes.resize(static_cast<std::size_t>(rows * cols));
    size_k4_tables(q, rows * cols / 256);
    for_each_superblock(q, data, kQ5KBlockBytes, row_order, [&](std::int64_t s, std::int64_t r, std::int64_t sb,
                                                                const std::uint8_t* blk) {
        read_k4_header(q, s, blk);
        const std::uint8_t *qh = blk + 16, *qs = blk + 48;
        std::uint8_t* out = q.codes.data() + r * cols + sb * 256;
        for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l) {
                const std::uint8_t b = qs[32 * c + l];
                out[64 * c + l] = static_cast<std::uint8_t>((b & 0x0f) | ((qh[l] >> (2 * c)) & 1) << 4);
                out[64 * c + 32 + l] = static_cast<std::uint8_t>((b >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4);
            }
        }
    });
    return q;
}

// ggml's Q6_K: per 256 columns 128 bytes of low nibbles, 64 of high bit pairs, 16 signed
// 8-bit scales, fp16 d. Half h (128 columns) reads ql[64h ..], qh[32h ..]: column 128h +
// 32k + l (k = 0..3, l = 0..31) has its low nibble in ql[64h + l + 32 (k & 1)] (low for
// k < 2, high for k >= 2) and its high bits at 2k in qh[32h + l]; its scale is sc[(32k +
// l) / 16 + 8h], i.e. column c of the super-block has sc[c / 16].
constexpr std::int64_t kQ6KBlockBytes = 210;

QuantMatrix q6k_from_ggml(const std::uint8_t* data, std::uint64_t nbytes, std::int64_t rows, std::int64_t cols,
                          const std::vector<std::int64_t>& row_order) {
    QuantMatrix q = checked_blocks("Q6_K", QuantFormat::Q6_K, rows, cols, 256, kQ6KBlockBytes, nbytes, row_order);
    q.block = 16;
    q.codes.resize(static_cast<std::size_t>(rows * cols));
    q.scales.resize(static_cast<std::size_t>(rows * cols / 256));
    q.sub_scales.resize(static_cast<std::size_t>(rows * cols / 16));
    for_each_superblock(q, data, kQ6KBlockBytes, row_order, [&](std::int64_t s, std::int64_t r, std::int64_t sb,
                                                                const std::uint8_t* blk) {
        const std::uint8_t *ql = blk, *qh = blk + 128, *sc = blk + 192;
        q.scales[s] = load_u16(blk + 208);
        std::memcpy(q.sub_scales.data() + s * 16, sc, 16);
        std::uint8_t* out = q.codes.data() + r * cols + sb * 256;
        for (int h = 0; h < 2; ++h) {
            for (int k = 0; k < 4; ++k) {
                for (int l = 0; l < 32; ++l) {
                    const std::uint8_t low = ql[64 * h + l + 32 * (k & 1)];
                    const int code = ((k < 2 ? low : low >> 4) & 0x0f) | ((qh[32 * h + l] >> (2 * k)) & 3) << 4;
                    out[128 * h + 32 * k + l] = static_cast<std::uint8_t>(static_cast<std::int8_t>(code - 32));
                }
            }
        }
    });
    return q;
}

}  // namespace

QuantMatrix quant_from_ggml(QuantFormat format, const std::uint8_t* data, std::uint64_t nbytes, std::int64_t rows,
                            std::int64_t cols, const std::vector<std::int64_t>& row_order) {
    if (format == QuantFormat::NF4) throw Error(ErrorCode::InvalidArgument, "quant_from_ggml: NF4 is not a ggml format");
    if (format == QuantFormat::Q4_K) return q4k_from_ggml(data, nbytes, rows, cols, row_order);
    if (format == QuantFormat::Q6_K) return q6k_from_ggml(data, nbytes, rows, cols, row_order);
    if (format == QuantFormat::Q5_K) return q5k_from_ggml(data, nbytes, rows, cols, row_order);
    // Q4_0 [d][16 bytes of nibbles], Q4_1 [d][m][16 bytes], Q8_0 [d][32 signed bytes].
    const bool has_min = format == QuantFormat::Q4_1, bytes8 = format == QuantFormat::Q8_0;
    const std::int64_t head = has_min ? 4 : 2, code_bytes = bytes8 ? 32 : 16, block_bytes = head + code_bytes;
    QuantMatrix q = checked_blocks(to_string(format), format, rows, cols, 32, block_bytes, nbytes, row_order);
    const std::int64_t bpr = cols / 32;
    q.codes.resize(static_cast<std::size_t>(rows * bpr * code_bytes));
    q.scales.resize(static_cast<std::size_t>(rows * bpr));
    if (has_min) q.mins.resize(q.scales.size());
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t src_row = row_order.empty() ? r : row_order[r];
        const std::uint8_t* blk = data + src_row * bpr * block_bytes;
        for (std::int64_t b = 0; b < bpr; ++b, blk += block_bytes) {
            q.scales[r * bpr + b] = load_u16(blk);
            if (has_min) q.mins[r * bpr + b] = load_u16(blk + 2);
            std::memcpy(q.codes.data() + (r * bpr + b) * code_bytes, blk + head, static_cast<std::size_t>(code_bytes));
        }
    }
    return q;
}

QuantMatrix quant_from_ggml_q5_0(const std::uint8_t* data, std::uint64_t nbytes, std::int64_t rows, std::int64_t cols,
                                 const std::vector<std::int64_t>& row_order) {
    constexpr std::int64_t kBlockBytes = 22;  // d, qh, 16 bytes of nibbles
    QuantMatrix q = checked_blocks("Q5_0", QuantFormat::Q8_0, rows, cols, 32, kBlockBytes, nbytes, row_order);
    const std::int64_t bpr = cols / 32;
    q.codes.resize(static_cast<std::size_t>(rows * cols));
    q.scales.resize(static_cast<std::size_t>(rows * bpr));
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t src_row = row_order.empty() ? r : row_order[r];
        const std::uint8_t* blk = data + src_row * bpr * kBlockBytes;
        for (std::int64_t b = 0; b < bpr; ++b, blk += kBlockBytes) {
            q.scales[r * bpr + b] = load_u16(blk);
            const std::uint32_t qh = static_cast<std::uint32_t>(blk[2]) | static_cast<std::uint32_t>(blk[3]) << 8 |
                                     static_cast<std::uint32_t>(blk[4]) << 16 | static_cast<std::uint32_t>(blk[5]) << 24;
            std::uint8_t* out = q.codes.data() + (r * bpr + b) * 32;
            for (int j = 0; j < 16; ++j) {  // column j: low nibble and bit j; column j + 16: high nibble and bit j + 16
                const int lo = (blk[6 + j] & 0x0f) | static_cast<int>((qh >> j) & 1u) << 4;
                const int hi = (blk[6 + j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
                out[j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(lo - 16));
                out[j + 16] = static_cast<std::uint8_t>(static_cast<std::int8_t>(hi - 16));
            }
        }
    }
    return q;
}

QuantMatrix concat_rows(const std::vector<QuantMatrix>& parts) {
    if (parts.empty()) throw Error(ErrorCode::InvalidArgument, "concat_rows: nothing to stack");
    QuantMatrix q;
    q.format = parts[0].format;
    q.cols = parts[0].cols;
    q.block = parts[0].block;
    q.lut = parts[0].lut;
    for (const auto& p : parts) {
        if (p.interleaved) throw Error(ErrorCode::InvalidArgument, "concat_rows: parts must be in row layout");
        if (p.format != q.format || p.cols != q.cols || p.block != q.block)
            throw Error(ErrorCode::InvalidArgument, "concat_rows: parts differ in format or width");
        q.rows += p.rows;
        q.codes.insert(q.codes.end(), p.codes.begin(), p.codes.end());
        q.scales.insert(q.scales.end(), p.scales.begin(), p.scales.end());
        q.mins.insert(q.mins.end(), p.mins.begin(), p.mins.end());
        q.sub_scales.insert(q.sub_scales.end(), p.sub_scales.begin(), p.sub_scales.end());
        q.sub_mins.insert(q.sub_mins.end(), p.sub_mins.begin(), p.sub_mins.end());
    }
    return q;
}

namespace {

// The code of (row, col) and the index of its scale, in either layout. Byte codes: the
// signed value (the int8 layout holds it plus 128).
int code_at(const QuantMatrix& q, std::int64_t row, std::int64_t col) {
    if (q.byte_codes()) {
        if (!q.interleaved) return static_cast<std::int8_t>(q.codes[static_cast<std::size_t>(row * q.cols + col)]);
        const std::int64_t k = col % 32;
        const std::uint8_t byte = q.codes[static_cast<std::size_t>(((row / 16) * (q.cols / 32) + col / 32) * 512 +
                                                                   (k / 4) * 64 + (row % 16) * 4 + k % 4)];
        return static_cast<int>(byte) - 128;
    }
    std::uint8_t byte;
    bool high;
    if (q.interleaved) {
        const std::int64_t k = col % 32, within = k % 8;
        byte = q.codes[static_cast<std::size_t>(((row / 16) * (q.cols / 32) + col / 32) * 256 + (k / 8) * 64 +
                                                (row % 16) * 4 + within % 4)];
        high = within >= 4;
    } else {
        byte = q.codes[static_cast<std::size_t>((row * q.cols + col / 32 * 32) / 2 + col % 16)];
        high = col % 32 >= 16;
    }
    return high ? byte >> 4 : byte & 0x0f;
}

// Entry j of row `row` in a table of n entries per row: [row][j] in the row layout,
// [row / 16][j][row % 16] in the int8 kernel's.
std::size_t table_at(bool interleaved, std::int64_t row, std::int64_t j, std::int64_t n) {
    return static_cast<std::size_t>(interleaved ? ((row / 16) * n + j) * 16 + row % 16 : row * n + j);
}

// Entries per row of the top-level tables (scales, mins): one per block, or for Q4_K one
// per 256 columns (its 6-bit factors per block in sub_scales / sub_mins).
std::int64_t top_per_row(const QuantMatrix& q) { return q.sub_scales.empty() ? q.blocks_per_row() : q.cols / 256; }

// The tables of `from` moved into `to`'s layout (sizes already set), row by row.
void move_tables(const QuantMatrix& from, QuantMatrix& to, std::int64_t row) {
    const std::int64_t top = top_per_row(from), bpr = from.blocks_per_row();
    for (std::int64_t j = 0; j < top; ++j) {
        const std::size_t a = table_at(from.interleaved, row, j, top), b = table_at(to.interleaved, row, j, top);
        to.scales[b] = from.scales[a];
        if (!from.mins.empty()) to.mins[b] = from.mins[a];
    }
    for (std::int64_t j = 0; j < bpr && !from.sub_scales.empty(); ++j) {
        const std::size_t a = table_at(from.interleaved, row, j, bpr), b = table_at(to.interleaved, row, j, bpr);
        to.sub_scales[b] = from.sub_scales[a];
        if (!from.sub_mins.empty()) to.sub_mins[b] = from.sub_mins[a];
    }
}

// Block b of row `row`: its scale and offset as floats, in either layout (quant_blocks.h).
std::pair<float, float> scale_offset(const QuantMatrix& q, std::int64_t row, std::int64_t b) {
    const std::int64_t bpr = q.blocks_per_row();
    if (!q.interleaved) return {block_scale(q, row * bpr + b), block_offset(q, row * bpr + b)};
    if (q.sub_scales.empty()) {
        const std::size_t s = table_at(true, row, b, bpr);
        return {fp16_to_float(q.scales[s]), q.mins.empty() ? 0.0f : fp16_to_float(q.mins[s])};
    }
    const int shift = super_shift(q);
    const std::size_t top = table_at(true, row, b >> shift, bpr >> shift), sub = table_at(true, row, b, bpr);
    return {fp16_to_float(q.scales[top]) * sub_scale(q, sub),
            q.mins.empty() ? 0.0f : -(fp16_to_float(q.mins[top]) * static_cast<float>(q.sub_mins[sub]))};
}

}  // namespace

QuantMatrix row_layout(const QuantMatrix& q) {
    if (q.on_cuda()) {
        QuantMatrix h = q;
        h.cuda = nullptr;
        const at::Tensor codes = q.cuda->codes.cpu().contiguous(), scales = q.cuda->scales.cpu().contiguous();
        h.codes.assign(codes.data_ptr<std::uint8_t>(), codes.data_ptr<std::uint8_t>() + codes.numel());
        const auto* sp = reinterpret_cast<const std::uint16_t*>(scales.data_ptr<std::int16_t>());
        h.scales.assign(sp, sp + scales.numel());
        if (q.cuda->mins.defined()) {
            const at::Tensor mins = q.cuda->mins.cpu().contiguous();
            const auto* mp = reinterpret_cast<const std::uint16_t*>(mins.data_ptr<std::int16_t>());
            h.mins.assign(mp, mp + mins.numel());
        }
        return h;  // the device copy is always in row layout
    }
    if (!q.interleaved) return q;
    QuantMatrix out;
    out.format = q.format;
    out.rows = q.rows;
    out.cols = q.cols;
    out.block = q.block;
    out.lut = q.lut;
    out.codes.assign(q.codes.size(), 0);
    out.scales.resize(q.scales.size());
    out.mins.resize(q.mins.size());
    out.sub_scales.resize(q.sub_scales.size());
    out.sub_mins.resize(q.sub_mins.size());
    for (std::int64_t row = 0; row < q.rows; ++row) {
        move_tables(q, out, row);
        if (q.byte_codes()) {
            for (std::int64_t col = 0; col < q.cols; ++col)
                out.codes[static_cast<std::size_t>(row * q.cols + col)] = static_cast<std::uint8_t>(code_at(q, row, col));
            continue;
        }
        std::uint8_t* dst = out.codes.data() + row * q.cols / 2;
        for (std::int64_t col = 0; col < q.cols; ++col) {
            const int code = code_at(q, row, col);
            std::uint8_t& byte = dst[col / 32 * 16 + col % 16];
            byte = static_cast<std::uint8_t>(col % 32 >= 16 ? (byte | code << 4) : (byte | code));
        }
    }
    return out;
}

QuantMatrix interleave_rows16(const QuantMatrix& q) {
    if (q.interleaved) return q;
    if (q.rows % 16 != 0 || q.cols % 32 != 0)
        throw Error(ErrorCode::InvalidArgument, "interleave_rows16: rows must come in groups of 16");
    QuantMatrix out;  // the metadata of q; every byte below is written once
    out.format = q.format;
    out.rows = q.rows;
    out.cols = q.cols;
    out.block = q.block;
    out.lut = q.lut;
    out.interleaved = true;
    out.codes.resize(q.codes.size());
    out.scales.resize(q.scales.size());
    out.mins.resize(q.mins.size());
    out.sub_scales.resize(q.sub_scales.size());
    out.sub_mins.resize(q.sub_mins.size());
    const std::int64_t G = q.cols / 32;
    at::parallel_for(0, q.rows / 16, 8, [&](std::int64_t g0, std::int64_t g1) {
        for (std::int64_t R = g0; R < g1; ++R) {
            for (std::int64_t r = 0; r < 16; ++r) {
                const std::int64_t row = R * 16 + r;
                move_tables(q, out, row);
                if (q.byte_codes()) {
                    // Slices of 512 bytes: line L (of 8) holds columns 4L .. 4L + 3, each
                    // signed byte plus 128 (an unsigned vpdpbusd operand).
                    const std::uint8_t* src = q.codes.data() + row * q.cols;
                    std::uint8_t* dst = out.codes.data() + R * G * 512 + r * 4;
                    for (std::int64_t g = 0; g < G; ++g, src += 32, dst += 512)
                        for (int L = 0; L < 8; ++L)
                            for (int t = 0; t < 4; ++t) dst[64 * L + t] = static_cast<std::uint8_t>(src[4 * L + t] ^ 0x80);
                    continue;
                }
                // A source group is 16 bytes: byte j holds column j (low nibble) and
                // j + 16 (high). Line c wants columns 8c + t and 8c + 4 + t: low nibbles
                // for c = 0, 1, high nibbles for c = 2, 3.
                const std::uint8_t* src = q.codes.data() + row * q.cols / 2;
                std::uint8_t* dst = out.codes.data() + R * G * 256 + r * 4;
                for (std::int64_t g = 0; g < G; ++g, src += 16, dst += 256) {
                    for (int c = 0; c < 4; ++c) {
                        const int shift = c < 2 ? 0 : 4, base = 8 * c - (c < 2 ? 0 : 16);
                        for (int t = 0; t < 4; ++t) {
                            const int lo = (src[base + t] >> shift) & 0x0f, hi = (src[base + 4 + t] >> shift) & 0x0f;
                            dst[64 * c + t] = static_cast<std::uint8_t>(lo | hi << 4);
                        }
                    }
                }
            }
        }
    });
    return out;
}

namespace {

// Row `row` of q into y[0, cols) in fp32: ggml's arithmetic, the same bits as the GGUF
// decoder (tst_quant).
void dequantize_row(const QuantMatrix& q, std::int64_t row, float* y) {
    for (std::int64_t b = 0; b < q.blocks_per_row(); ++b) {
        const auto [d, m] = scale_offset(q, row, b);
        float* yb = y + b * q.block;
        if (q.byte_codes()) {  // ggml: x = q * d (Q5_K: minus dmin * m; the product is exact)
            for (std::int64_t j = 0; j < q.block; ++j)
                yb[j] = m == 0.0f ? static_cast<float>(code_at(q, row, b * q.block + j)) * d
                                  : static_cast<float>(code_at(q, row, b * q.block + j)) * d + m;
            continue;
        }
        if (q.interleaved) {
            for (std::int64_t j = 0; j < q.block; ++j) yb[j] = q.lut[code_at(q, row, b * q.block + j)] * d + m;
            continue;
        }
        const std::uint8_t* c = q.codes.data() + (row * q.cols + b * q.block) / 2;
        for (std::int64_t g = 0; g < q.block; g += 32) {
            for (int j = 0; j < 16; ++j) {
                yb[g + j] = q.lut[c[g / 2 + j] & 0x0f] * d + m;
                yb[g + j + 16] = q.lut[c[g / 2 + j] >> 4] * d + m;
            }
        }
    }
}

}  // namespace

at::Tensor dequantize(const QuantMatrix& q, std::int64_t row_begin, std::int64_t row_end, at::ScalarType dtype) {
    if (q.on_cuda()) return dequantize(row_layout(q), row_begin, row_end, dtype);
    if (row_begin < 0 || row_end > q.rows || row_begin > row_end)
        throw Error(ErrorCode::InvalidArgument, "dequantize: rows outside the matrix");
    const std::int64_t n = row_end - row_begin;
    at::Tensor out = at::empty({n, q.cols}, at::kFloat);  // [n, cols]
    float* y = out.data_ptr<float>();
    at::parallel_for(0, n, 16, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) dequantize_row(q, row_begin + r, y + r * q.cols);
    });
    return dtype == at::kFloat ? out : out.to(dtype);
}

at::Tensor dequantize_rows(const QuantMatrix& q, const at::Tensor& rows, at::ScalarType dtype) {
    if (q.on_cuda() || rows.dim() != 1 || !rows.device().is_cpu())
        throw Error(ErrorCode::InvalidArgument, "dequantize_rows: blocks and row ids [n] on the CPU");
    const at::Tensor ids = rows.to(at::kLong).contiguous();
    const std::int64_t n = ids.size(0);
    const std::int64_t* id = ids.data_ptr<std::int64_t>();
    for (std::int64_t r = 0; r < n; ++r)
        if (id[r] < 0 || id[r] >= q.rows)
            throw Error(ErrorCode::InvalidArgument, "dequantize_rows: row " + std::to_string(id[r]) + " outside the " +
                                                        std::to_string(q.rows) + " rows");
    at::Tensor out = at::empty({n, q.cols}, at::kFloat);  // [n, cols]
    float* y = out.data_ptr<float>();
    at::parallel_for(0, n, 64, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) dequantize_row(q, id[r], y + r * q.cols);
    });
    return dtype == at::kFloat ? out : out.to(dtype);
}

}  // namespace kev
