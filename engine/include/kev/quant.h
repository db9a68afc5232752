// 4-bit weights: the weight of a linear layer held in blocks of 4-bit codes with a
// scale per block, multiplied without ever materialising the whole dense matrix.
//
// One layout serves three formats. A row of `cols` weights is cut into blocks of
// `block` elements (64 for NF4, 32 for GGUF's Q4_0/Q4_1); every block has an fp16
// scale d (and, for Q4_1, an fp16 offset m), and each weight is
//     w = lut[code] * d (+ m)
// with a 16-entry table of code values per format:
//   NF4   QLoRA's NormalFloat-4 codebook (values in [-1, 1]); d = the block's absmax
//   Q4_0  code - 8                     (ggml: x = (q - 8) * d)
//   Q4_1  code, plus the offset m      (ggml: x = q * d + m)
//   Q4_K  code, scale d * sc, offset -(dmin * m): ggml's Q4_K super-blocks of 256 (fp16 d
//         and dmin) over 8 blocks of 32 with 6-bit sc and m, kept as two levels
//         (model/quant_blocks.h); 4.625 bits/weight. CPU only: the row kernels below
//         multiply it with fp32 activations, the int8 kernel with half activations
//         (scales d * sc and mins -(dmin * m) formed in fp32, exact, per slice).
// One byte-code format sits beside them: its codes are whole bytes, not nibbles:
//   Q8_0  a signed byte per weight and an fp16 d per 32 (ggml: x = q * d), 8.5
//         bits/weight as in the file. q * d is exact in fp32 (8 + 11 significant
//         bits), so the byte kernels (model/linear_q8.cpp; fp32 activations) multiply
//         the file's own weights; with half activations the int8 kernel multiplies the
//         bytes by int8 activations, as llama.cpp's Q8_0 x Q8_0 does. CPU only.
//   Q6_K  ggml's Q6_K super-blocks of 256 (fp16 d) over 16 blocks of 16 with a signed
//         8-bit sc each; the 6-bit codes kept as signed bytes q - 32 (block = 16), the
//         scale d * sc (11 + 7 significant bits) and q * d * sc (+ 5) exact in fp32, so
//         the byte kernels multiply the file's own weights (fp32 activations); with half
//         activations the int8 kernel sums each 32-column slice's halves apart and scales
//         them in turn. 8.56 bits/weight (the file's 6.56; the codes unpacked to bytes).
//         CPU only.
//   Q5_K  ggml's Q5_K super-blocks of 256 (fp16 d and dmin) over 8 blocks of 32 with 6-bit
//         sc and m, as Q4_K; the 5-bit codes kept as bytes 0..31 (block = 32), each weight
//         q * (d * sc) - dmin * m, the product exact in fp32 and the difference rounded
//         once, as ggml decodes it. 8.625 bits/weight (the file's 5.5). The byte kernels
//         (with the block's offset) for fp32 activations; with half activations the int8
//         kernel multiplies the bytes as Q8_0's, with Q4_K's epilogue. CPU only.
// Codes are packed two per byte in 32-element groups, ggml's way: byte j of a group
// holds element j in its low nibble and element j + 16 in its high nibble, so GGUF
// Q4_0/Q4_1 blocks are taken over byte for byte and one kernel reads all formats.
// Scales are not double-quantized (an fp16 per 64 weights costs 0.25 bit/weight).
//
// Memory: NF4 4.25 bits/weight (0.27x bf16), Q4_0 4.5 (0.28x), Q4_1 5 (0.31x, as in
// the file). 4-bit weights run on the CPU and, in a build with the CUDA kernels, on
// CUDA (quant_to_cuda below).
//
// A second layout serves the int8 kernel (prepare_quant below): rows in groups of 16,
// and per group and 32-column slice 256 bytes in which byte 4r + t of line c (c = 0..3,
// 64 bytes each) holds row r's code of column 8c + t in its low nibble and of column
// 8c + 4 + t in its high nibble. Expanded, a line is two vectors of 16 rows x 4
// columns: the operand of one vpdpbusd against 4 broadcast activation bytes. Scales
// (and mins) are then [group][block][16 rows]. Same bytes, same values, other order.
// Byte codes (Q8_0) take 512 bytes per group and slice: line L (L = 0..7) holds row r's
// bytes of columns 4L .. 4L + 3 at 4r + t, each the signed value plus 128.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kev {

enum class QuantFormat { NF4, Q4_0, Q4_1, Q4_K, Q8_0, Q6_K, Q5_K };
const char* to_string(QuantFormat format);

// QLoRA's NF4 code values (quantiles of N(0, 1) scaled to [-1, 1], with an exact 0).
extern const std::array<float, 16> kNf4Codebook;

// A 4-bit matrix's blocks in CUDA memory, row layout: codes uint8 [rows * cols / 2],
// scales and mins int16 (fp16 bits) [rows * cols / block]; mins undefined but for Q4_1.
struct QuantCudaBlocks {
    at::Tensor codes, scales, mins;
};

struct QuantMatrix {
    QuantFormat format = QuantFormat::NF4;
    std::int64_t rows = 0;   // out features
    std::int64_t cols = 0;   // in features, a multiple of `block`
    std::int64_t block = 64; // elements per scale: 64 (NF4), 32, or 16 (Q6_K, byte codes)
    std::vector<std::uint8_t> codes;    // [rows * cols / 2] packed nibbles (see above); Q8_0: [rows * cols] int8
    std::vector<std::uint16_t> scales;  // [rows * cols / block] fp16 bits
    std::vector<std::uint16_t> mins;    // [rows * cols / block] fp16 bits, Q4_1 only
    // Q4_K: scales / mins hold d / dmin per 256 columns ([rows * cols / 256] fp16 bits) and
    // these the 6-bit sc / m per 32-column block ([rows * cols / 32]). Q6_K: scales hold d
    // per 256 columns and sub_scales the signed 8-bit sc (as its byte) per 16 columns.
    // Q5_K: the four tables as Q4_K's.
    std::vector<std::uint8_t> sub_scales, sub_mins;
    std::array<float, 16> lut{};        // code -> value before scaling
    bool interleaved = false;           // the int8 kernel's layout (see above)
    // On CUDA: the blocks in device memory, and codes/scales/mins above left empty.
    std::shared_ptr<const QuantCudaBlocks> cuda;
    bool on_cuda() const { return cuda != nullptr; }

    std::int64_t blocks_per_row() const { return cols / block; }
    bool byte_codes() const {  // a byte per code
        return format == QuantFormat::Q8_0 || format == QuantFormat::Q6_K || format == QuantFormat::Q5_K;
    }
    std::int64_t bytes() const;  // codes + scales + mins
};

// Quantizes a dense [rows, cols] weight (any float dtype, CPU) to NF4: per block the
// absmax becomes the scale and each element the nearest codebook value of w / absmax.
// cols must be a multiple of 32 (block 64 when cols allows it, else 32); throws
// InvalidArgument otherwise.
QuantMatrix quantize_nf4(const at::Tensor& weight);

// Takes GGUF Q4_0, Q4_1, Q8_0, Q4_K, Q5_K or Q6_K blocks over as they are: `data` holds
// rows * cols / 32 ggml blocks (18, 20 or 34 bytes each; K-quants: rows * cols / 256
// blocks of 144, 176 or 210 bytes, cols a multiple of 256), `nbytes` how many bytes are
// readable there (checked). Q4_K's codes are reordered into the layout above (the same
// values), Q5_K's become bytes 0..31 and Q6_K's signed bytes q - 32, in column order;
// their scales are kept as they are.
// Row r of the result is source row row_order[r] (identity when empty): the loader's
// way of undoing llama.cpp's q/k row permutation without touching the codes.
QuantMatrix quant_from_ggml(QuantFormat format, const std::uint8_t* data, std::uint64_t nbytes, std::int64_t rows,
                            std::int64_t cols, const std::vector<std::int64_t>& row_order = {});

// GGUF Q5_0 blocks ([fp16 d][32 high bits][16 bytes of low nibbles] per 32) taken over
// exactly as Q8_0-format byte codes: each weight's code q5 - 16 (-16..15) as a signed
// byte, d as it is. The same values (d * (q5 - 16)), 8.5 bits a weight instead of the
// file's 5.5; the Q8_0 kernels multiply them. Bounds and row order as quant_from_ggml.
QuantMatrix quant_from_ggml_q5_0(const std::uint8_t* data, std::uint64_t nbytes, std::int64_t rows, std::int64_t cols,
                                 const std::vector<std::int64_t>& row_order = {});

// Stacks matrices of one format and width row-wise (q | k | v, gate | up); row layout.
QuantMatrix concat_rows(const std::vector<QuantMatrix>& parts);

// Rows [row_begin, row_end) dequantized to `dtype` (fp32, bf16 or fp16): [n, cols].
at::Tensor dequantize(const QuantMatrix& q, std::int64_t row_begin, std::int64_t row_end, at::ScalarType dtype);
inline at::Tensor dequantize(const QuantMatrix& q, at::ScalarType dtype) { return dequantize(q, 0, q.rows, dtype); }
// Rows rows[0], rows[1], ... (int64 ids on the CPU, each checked) dequantized to `dtype`,
// [n, cols], the same values as dequantize: a lookup in an embedding kept as blocks.
at::Tensor dequantize_rows(const QuantMatrix& q, const at::Tensor& rows, at::ScalarType dtype);

// y = x W^T (+ bias) for x [M, cols] (fp32, bf16 or fp16, CPU); y has x's dtype.
// An interleaved q goes to the int8 kernel (below) for every M. In the row layout,
// decode shapes (M <= kQuantGemvMaxRows) use the fused dequantize-and-multiply kernel,
// larger M dequantizes chunks of output rows and multiplies them with at::linear.
constexpr std::int64_t kQuantGemvMaxRows = 16;
at::Tensor quant_linear(const at::Tensor& x, const QuantMatrix& w, const at::Tensor& bias);

// --- CUDA ---
// The fused CUDA kernels (engine/src/cuda/linear_kernels.cu) multiply every shape, one
// token or a whole prompt, in one fixed order written once in model/q4_order.h: per
// output, block sums as fma chains in column order, added per 256-column slice, the
// slices added in order. The result of a row depends on nothing else in the call, so
// a card computes the same bits alone or in any pack, in a prompt or a decode step.
// Activations fp32, fp16 or bf16 (read as such, never rounded further); fp32 sums.
//
// Whether this build compiled them (CMake found nvcc: KEV_CUDA_KERNELS).
bool quant_cuda_kernels_built();
// q's blocks moved to CUDA memory (row layout; an interleaved q is turned back first).
// Throws Unsupported without the kernels or without a device.
QuantMatrix quant_to_cuda(QuantMatrix q);
// The form the CUDA kernels take for fp16 / bf16 activations: Fma (the fixed order
// above, the default) or Tiles (tensor cores: per block a WMMA tile product of the
// activations and the codes' values, scaled and added in the same fixed order; rows
// alone == rows in any pack, but not the twin's bits). KEV_CUDA_Q4=tiles chooses Tiles
// at start; it stays opt-in until a GPU check has measured it. fp32 activations always
// take Fma.
enum class CudaQ4Form { Fma, Tiles };
CudaQ4Form cuda_q4_form();
void set_cuda_q4_form(CudaQ4Form form);
// The CPU twin of the CUDA kernels: the same arithmetic (q4_order.h) on the CPU, slow
// and exact, for the tests and for checks on a GPU. x [M, cols] any float dtype, q in
// host memory (either layout); the result is fp32 [M, rows] (+ bias).
at::Tensor quant_linear_fixed_order(const at::Tensor& x, const QuantMatrix& q, const at::Tensor& bias);

// The int8 kernel: activations quantized per row and 32-column slice to int8 (scale =
// absmax / 127, round to nearest even, as llama.cpp's Q8_0), multiplied with the codes
// as unsigned bytes by AVX512-VNNI (vpdpbusd) into exact int32 sums per 32 columns, and
// only then scaled: sum += float(S) * dx * d (+ m * dx * sum(q)). NF4 codes enter as
// round(127 * value) (at most 1/254 of the block scale off the codebook); Q4_0/Q4_1
// codes are small integers and enter exactly. Because the sums are exact and each
// row's float steps run in one fixed order, a row's result does not depend on how many
// rows share the call or on the thread split: prefill and decode, a card alone or in a
// pack, compute bit-identical rows.
//
// Paths: AVX-512 VNNI (vpdpbusd); AVX-VNNI (vpdpbusd on ymm, the avx2 family's path
// where the CPU has it: Intel since Alder Lake); AVX2 (vpmaddubsw + vpmaddwd, llama.cpp's
// Q4_0 x Q8_0 on AVX2; NF4 enters signed so no pair saturates); the scalar twin; and, where the CPU
// has AMX-INT8, calls of 32 rows or more (prefill) multiply whole 16-row passes on the
// tile unit. All compute the same exact sums and the same float steps per output, so the
// same bits (tst_quant compares them). The path is the widest under the kernel-family
// ceiling (kev/cpu_kernels.h); KEV_Q4_INT8_AMX=0 keeps prompts off the tiles,
// KEV_Q4_INT8_AVXVNNI=0 (or set_quant_int8_avx_vnni(false)) keeps the avx2 family on
// vpmaddubsw where the CPU has AVX-VNNI, and KEV_Q4_INT8=0 turns the int8 kernel off
// (the row layout's fused kernels then serve).
bool quant_int8_available();
enum class Int8Kernel { Scalar, Avx2, AvxVnni, Vnni, Amx };  // Scalar: the portable twin (tests)
const char* to_string(Int8Kernel kernel);
bool quant_int8_kernel_supported(Int8Kernel kernel);
// Process-wide; takes effect at the next call. The default comes from KEV_Q4_INT8_AVXVNNI.
void set_quant_int8_avx_vnni(bool allowed);
Int8Kernel quant_int8_kernel();         // the one quant_linear uses now
const char* quant_int8_prompt_kernel();  // its name for prompts (AMX tiles where used)
// q in the int8 kernel's layout when the activations will be half precision (bf16 /
// fp16; fp32 activations keep the exact fused kernels) and the shape allows it (rows a
// multiple of 16); otherwise q unchanged. quant_linear then runs every call on it,
// whatever the number of rows.
QuantMatrix prepare_quant(QuantMatrix q, at::ScalarType activations);
// q in the row layout in host memory (q itself when it is so already): an interleaved
// q turned back, a CUDA q copied back.
QuantMatrix row_layout(const QuantMatrix& q);
// The int8 layout regardless of the CPU's features (tests; rows a multiple of 16).
QuantMatrix interleave_rows16(const QuantMatrix& q);
// y = x W^T (+ bias) by the int8 kernel for x [M, cols] (any float dtype, any M) and an
// interleaved w; y has x's dtype. Every path computes the same bits (tests compare
// them); Unsupported for a path this CPU lacks.
at::Tensor quant_int8_linear(const at::Tensor& x, const QuantMatrix& w, const at::Tensor& bias, Int8Kernel kernel);

// The fused kernel's instruction-set path: the widest under the kernel-family ceiling;
// KEV_Q4_KERNEL=avx512|avx2|scalar forces one (one the CPU lacks is refused). The same
// switch picks the byte kernels' path (Q8_0): AVX-512F, AVX2 + FMA, scalar.
enum class QuantKernel { Avx512, Avx2, Scalar };
const char* to_string(QuantKernel kernel);
QuantKernel quant_kernel();                       // the path used now
bool quant_kernel_supported(QuantKernel kernel);  // whether this CPU can run it
// Runs the fused kernel with an explicit path (tests compare paths); M <= kQuantGemvMaxRows;
// row layout only. Byte-code matrices (Q8_0) go to their own kernels: weights q * d exact
// in fp32, activations read as fp32 (bf16 / fp16 widened exactly), fp32 FMAs in one
// order per output row, so a row's result does not depend on the other rows.
at::Tensor quant_gemv(const at::Tensor& x, const QuantMatrix& w, const at::Tensor& bias, QuantKernel kernel);

}  // namespace kev
