#include "tokenizer/bpe.h"

#include <cstdio>
#include <algorithm>
#include <queue>
#include <unordered_map>

#include "kev/error.h"
#include "tokenizer/unicode.h"

namespace kev::tok {

namespace {

inline std::uint64_t pair_key(TokenId l, TokenId r) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(l)) << 32) |
           static_cast<std::uint32_t>(r);
}

inline std::uint64_t mix(std::uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

// Words below this many symbols are merged by rescanning; above, by a priority queue.
constexpr std::size_t kShortWord = 48;

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, TokenId> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, Options options)
    : vocab_(std::move(vocab)), options_(options) {
    std::size_t cap = 16;
    while (cap < merges.size() * 2) cap <<= 1;
    merges_.assign(cap, Merge{});
    mask_ = cap - 1;
    std::int32_t rank = 0;
    std::string joined;
    for (const auto& [a, b] : merges) {
        const std::int32_t this_rank = rank++;
        auto ia = vocab_.find(a), ib = vocab_.find(b);
        joined = a;
        joined += b;
        auto im = vocab_.find(joined);
        // As the tokenizers library refuses such a file (MergeTokenOutOfVocabulary): a merge
        // whose parts or result are not tokens cannot be what the model was trained with.
        if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end()) {
            const std::string& missing = ia == vocab_.end() ? a : ib == vocab_.end() ? b : joined;
            throw Error(ErrorCode::Format, "merge " + std::to_string(this_rank) + " ('" + a + " " + b + "') needs '" +
                                               missing + "', which is not in the vocabulary");
        }
        const std::uint64_t key = pair_key(ia->second, ib->second);
        std::uint64_t slot = mix(key) & mask_;
        while (merges_[slot].key != ~0ull && merges_[slot].key != key) slot = (slot + 1) & mask_;
        // A repeated merge takes its last rank, as the tokenizers library's map does.
        merges_[slot] = Merge{key, this_rank, im->second};
    }
    for (int b = 0; b < 256; ++b) {
        byte_ids_[b] = -1;
        std::string piece;
        if (options_.byte_level) {
            piece = byte_to_unicode()[b];
        } else if (options_.byte_fallback) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "<0x%02X>", b);
            piece = buf;
        } else {
            continue;
        }
        auto it = vocab_.find(piece);
        if (it != vocab_.end()) byte_ids_[b] = it->second;
    }
}

std::optional<TokenId> BpeModel::find(std::string_view piece) const {
    auto it = vocab_.find(std::string(piece));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const BpeModel::Merge* BpeModel::find_merge(TokenId left, TokenId right) const {
    const std::uint64_t key = pair_key(left, right);
    std::uint64_t slot = mix(key) & mask_;
    for (;;) {
        const Merge& m = merges_[slot];
        if (m.key == key) return &m;
        if (m.key == ~0ull) return nullptr;
        slot = (slot + 1) & mask_;
    }
}

void BpeModel::initial_symbols(std::string_view word, std::vector<TokenId>& symbols) const {
    symbols.clear();
    if (options_.byte_level) {
        // A vocabulary may lack some bytes (SmolLM2 has no 0x04 or 0xF1). The tokenizers
        // library then writes unk, or drops the byte when there is no unk; so does Kev.
        bool last_unk = false;
        for (unsigned char c : word) {
            const TokenId id = byte_ids_[c];
            if (id >= 0) {
                symbols.push_back(id);
                last_unk = false;
            } else if (options_.unk) {
                if (!(options_.fuse_unk && last_unk)) symbols.push_back(*options_.unk);
                last_unk = true;
            }
        }
        return;
    }
    // Character-level start: each character that is in the vocabulary is a symbol;
    // others become byte tokens (byte fallback) or unk.
    std::size_t i = 0;
    bool last_unk = false;
    while (i < word.size()) {
        const std::size_t start = i;
        next_code_point(word, i);
        const std::string_view ch = word.substr(start, i - start);
        auto it = vocab_.find(std::string(ch));
        if (it != vocab_.end()) {
            symbols.push_back(it->second);
            last_unk = false;
            continue;
        }
        if (options_.byte_fallback) {
            bool all = true;
            for (unsigned char c : ch) all = all && byte_ids_[c] >= 0;
            if (all) {
                for (unsigned char c : ch) symbols.push_back(byte_ids_[c]);
                last_unk = false;
                continue;
            }
        }
        if (!options_.unk) throw Error(ErrorCode::InvalidArgument, "character '" + std::string(ch) + "' is not in the vocabulary and the model has no unk token");
        if (!(options_.fuse_unk && last_unk)) symbols.push_back(*options_.unk);
        last_unk = true;
    }
}

void BpeModel::merge_short(std::vector<TokenId>& s) const {
    // Rank of each adjacent pair, kept up to date: a merge changes only its two neighbours'
    // pairs, so each step costs one scan of small integers and two hash lookups.
    thread_local std::vector<std::int32_t> rank;
    thread_local std::vector<TokenId> merged;
    const std::size_t n = s.size();
    if (n < 2) return;
    rank.resize(n - 1);
    merged.resize(n - 1);
    auto refresh = [&](std::size_t i) {
        const Merge* m = find_merge(s[i], s[i + 1]);
        rank[i] = m ? m->rank : INT32_MAX;
        merged[i] = m ? m->merged : 0;
    };
    for (std::size_t i = 0; i + 1 < n; ++i) refresh(i);
    std::size_t pairs = n - 1;
    while (pairs > 0) {
        std::size_t best = 0;
        for (std::size_t i = 1; i < pairs; ++i)
            if (rank[i] < rank[best]) best = i;  // strict: the leftmost of equal ranks wins
        if (rank[best] == INT32_MAX) break;
        s[best] = merged[best];
        s.erase(s.begin() + static_cast<std::ptrdiff_t>(best) + 1);
        rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(best));
        merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(best));
        --pairs;
        if (best > 0) refresh(best - 1);
        if (best < pairs) refresh(best);
    }
}

bool BpeModel::merge_long_buckets(std::vector<TokenId>& s) const {
    // Candidate merges grouped by rank: a bucket per rank present, and a heap of the ranks
    // only (a long word has few distinct ones). Each bucket is processed leftmost first,
    // which is exactly the heap order (rank, position).
    //
    // This relies on what BPE training guarantees: a merge that uses token T comes after
    // the merge that made T, so merging at rank r only creates pairs of rank > r. A vocabulary
    // that breaks this is detected (a new pair ranked <= r) and the caller falls back to
    // the general heap. Cost: O(n log distinct-ranks) instead of O(n log n).
    const auto n = static_cast<std::int32_t>(s.size());
    std::vector<std::int32_t> prev(n), next(n);
    std::vector<char> alive(n, 1);
    for (std::int32_t i = 0; i < n; ++i) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    std::unordered_map<std::int32_t, std::vector<std::int32_t>> buckets;  // rank -> positions
    std::priority_queue<std::int32_t, std::vector<std::int32_t>, std::greater<std::int32_t>> ranks;
    std::int32_t current = -1;
    bool monotone = true;
    auto push = [&](std::int32_t pos) {
        if (pos < 0) return;
        const std::int32_t nx = next[pos];
        if (nx < 0) return;
        const Merge* m = find_merge(s[pos], s[nx]);
        if (!m) return;
        if (m->rank <= current) {
            monotone = false;
            return;
        }
        auto& bucket = buckets[m->rank];
        if (bucket.empty()) ranks.push(m->rank);
        bucket.push_back(pos);
    };
    for (std::int32_t i = 0; i + 1 < n; ++i) push(i);
    std::vector<std::int32_t> positions;
    while (!ranks.empty() && monotone) {
        current = ranks.top();
        ranks.pop();
        auto it = buckets.find(current);
        positions.swap(it->second);
        buckets.erase(it);
        if (!std::is_sorted(positions.begin(), positions.end())) std::sort(positions.begin(), positions.end());
        for (std::int32_t pos : positions) {
            if (!alive[pos]) continue;
            const std::int32_t nx = next[pos];
            if (nx < 0) continue;
            const Merge* m = find_merge(s[pos], s[nx]);
            if (!m || m->rank != current) continue;
            s[pos] = m->merged;
            alive[nx] = 0;
            next[pos] = next[nx];
            if (next[nx] >= 0) prev[next[nx]] = pos;
            push(prev[pos]);
            push(pos);
        }
        positions.clear();
    }
    if (!monotone) return false;
    std::size_t w = 0;
    for (std::int32_t i = 0; i < n; ++i)
        if (alive[i]) s[w++] = s[i];
    s.resize(w);
    return true;
}

void BpeModel::merge_long_heap(std::vector<TokenId>& s) const {
    // Symbols in a doubly linked list over their original positions; candidate merges in a
    // min-heap by (rank, position). A popped candidate is stale when either side has been
    // merged away or the pair no longer produces the same token; it is then skipped.
    struct Cand {
        std::int32_t rank;
        std::int32_t pos;
        TokenId merged;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const auto n = static_cast<std::int32_t>(s.size());
    std::vector<std::int32_t> prev(n), next(n);
    std::vector<char> alive(n, 1);
    for (std::int32_t i = 0; i < n; ++i) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    std::vector<Cand> storage;
    storage.reserve(n);
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap(std::greater<Cand>{}, std::move(storage));
    auto push = [&](std::int32_t pos) {
        if (pos < 0) return;
        const std::int32_t nx = next[pos];
        if (nx < 0) return;
        if (const Merge* m = find_merge(s[pos], s[nx])) heap.push(Cand{m->rank, pos, m->merged});
    };
    for (std::int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        if (!alive[c.pos]) continue;
        const std::int32_t nx = next[c.pos];
        if (nx < 0) continue;
        const Merge* m = find_merge(s[c.pos], s[nx]);
        if (!m || m->merged != c.merged) continue;
        s[c.pos] = c.merged;
        alive[nx] = 0;
        next[c.pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = c.pos;
        push(prev[c.pos]);
        push(c.pos);
    }
    std::size_t w = 0;
    for (std::int32_t i = 0; i < n; ++i)
        if (alive[i]) s[w++] = s[i];
    s.resize(w);
}

void BpeModel::encode_word(std::string_view word, std::vector<TokenId>& out) const {
    if (options_.ignore_merges) {
        // Llama 3 style: a word that is itself a token is taken whole.
        std::string spelled;
        if (options_.byte_level) {
            for (unsigned char c : word) spelled += byte_to_unicode()[c];
        } else {
            spelled = std::string(word);
        }
        auto it = vocab_.find(spelled);
        if (it != vocab_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    thread_local std::vector<TokenId> symbols;
    initial_symbols(word, symbols);
    if (symbols.size() < kShortWord) {
        merge_short(symbols);
    } else {
        thread_local std::vector<TokenId> original;
        original = symbols;
        if (!merge_long_buckets(symbols)) {
            symbols.swap(original);
            merge_long_heap(symbols);
        }
    }
    out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace kev::tok
