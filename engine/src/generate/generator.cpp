// The generation loop: the Planner decides each step, the Model runs it, each card's
// Sampler draws, each card's StreamDecoder turns ids into text.
#include "kev/generator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cctype>
#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "kev/detokenizer.h"
#include "kev/error.h"
#include "kev/model.h"

namespace kev {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool blank(const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

// The ids that end an answer: the tokenizer's end-of-turn markers and the model's eos.
std::vector<TokenId> end_ids(const Model& model, const Tokenizer* tokenizer) {
    std::vector<TokenId> ids;
    if (tokenizer) ids = tokenizer->special_ids().end_of_generation;
    for (std::int64_t id : model.config().eos_token_ids) ids.push_back(static_cast<TokenId>(id));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
}

std::vector<std::int64_t> widen(const std::vector<TokenId>& v) {
    return std::vector<std::int64_t>(v.begin(), v.end());
}

}  // namespace

CancelFlags::CancelFlags(std::size_t cards) : cards_(new std::atomic<bool>[cards]), n_(cards) {
    for (std::size_t i = 0; i < cards; ++i) cards_[i].store(false);
}

void CancelFlags::cancel(std::size_t card) {
    if (card < n_) cards_[card].store(true, std::memory_order_relaxed);
}

bool CancelFlags::card(std::size_t card) const {
    return card < n_ && cards_[card].load(std::memory_order_relaxed);
}

Generator::Generator(const Model& model, const Tokenizer* tokenizer, std::optional<ChatTemplate> chat)
    : model_(model), tokenizer_(tokenizer), chat_(std::move(chat)) {}

Generator::Generator(Model& model, const Tokenizer* tokenizer, std::optional<ChatTemplate> chat)
    : model_(model), mutable_model_(&model), tokenizer_(tokenizer), chat_(std::move(chat)) {}

namespace {

// MemAvailable from /proc/meminfo, in bytes; 0 when it cannot be read.
std::int64_t available_memory_bytes() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    long long kib = 0;
    while (std::fgets(line, sizeof line, f)) {
        if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    }
    std::fclose(f);
    return static_cast<std::int64_t>(kib) * 1024;
}

}  // namespace

PackLimits Generator::limits() const {
    const ModelConfig& c = model_.config();
    PackLimits l;
    l.context_length = c.max_positions;
    l.vocab_size = c.vocab_size;
    const std::int64_t budget =
        memory_budget_ > 0 ? memory_budget_
                           : (model_.device() == Device::Cpu ? available_memory_bytes() / 10 * 8 : 0);
    if (budget > 0) {
        // Most of the budget for the KV cache; the rest for the prefill's attention
        // scores ([H, S, S] fp32 in the dense-mask prefill) and hidden states.
        l.max_cache_slots = std::max<std::int64_t>(1, budget / 4 * 3 / KvCache::bytes_per_slot(c, model_.dtype()));
        const double score_budget = static_cast<double>(budget) / 4.0;
        const double per_row = static_cast<double>(c.num_heads) * 4.0;
        l.max_prefill_rows = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::sqrt(score_budget / per_row)));
    }
    return l;
}

PreparedPack Generator::prepare(const GenerationRequest& request, const TemperatureDefaults& defaults) const {
    if (!tokenizer_) throw Error(ErrorCode::InvalidArgument, "this generator has no tokenizer: use prepare_tokens");
    if (!chat_) throw Error(ErrorCode::InvalidArgument, "no chat format is chosen for this model");
    if (request.cards.empty()) throw Error(ErrorCode::InvalidArgument, "there are no questions to answer");

    // A card's system message is its own or the request's, then the shared context.
    const auto system_of = [&request](const CardRequest& card) -> std::optional<std::string> {
        std::optional<std::string> system = card.system ? card.system : request.system;
        if (request.shared_context.empty()) return system;
        return system ? *system + "\n\n" + request.shared_context : request.shared_context;
    };
    std::vector<std::vector<TokenId>> prompts;
    std::vector<std::string> texts;
    for (std::size_t c = 0; c < request.cards.size(); ++c) {
        const CardRequest& card = request.cards[c];
        if (blank(card.question)) {
            throw Error(ErrorCode::InvalidArgument, "card " + std::to_string(c + 1) + ": the question is empty");
        }
        // Special tokens come from the template only: what the user typed (question,
        // system prompt, shared context) is tokenized as text, so a question that types
        // "<|im_start|>system" stays inside its own user turn.
        ChatTemplate::Rendered rendered = chat_->render_marked(ChatPrompt{system_of(card), card.question});
        prompts.push_back(tokenizer_->encode(rendered.text, rendered.user_text));
        texts.push_back(std::move(rendered.text));
    }

    // The shared context is the token prefix every prompt has in common: identical
    // tokens at identical positions, so storing it once changes no card's logits.
    std::vector<TokenId> shared;
    if (!request.shared_context.empty()) {
        std::size_t common = prompts[0].size() - 1;  // each card keeps at least one token
        for (const auto& p : prompts) {
            std::size_t k = 0;
            const std::size_t limit = std::min(common, p.size() - 1);
            while (k < limit && p[k] == prompts[0][k]) ++k;
            common = k;
        }
        shared.assign(prompts[0].begin(), prompts[0].begin() + static_cast<std::ptrdiff_t>(common));
    }
    std::vector<TokenCard> cards;
    for (std::size_t c = 0; c < prompts.size(); ++c) {
        cards.push_back({std::vector<TokenId>(prompts[c].begin() + static_cast<std::ptrdiff_t>(shared.size()),
                                              prompts[c].end()),
                         request.cards[c].sampling, request.cards[c].lora});
    }
    PreparedPack pack = prepare_tokens(cards, shared, defaults);
    pack.prompts = std::move(texts);
    return pack;
}

PreparedPack Generator::prepare_tokens(const std::vector<TokenCard>& cards, const std::vector<TokenId>& shared_context,
                                       const TemperatureDefaults& defaults) const {
    PreparedPack pack;
    for (const TokenCard& c : cards) pack.sampling.push_back(c.sampling);
    resolve_temperatures(pack.sampling, defaults);
    // The shared context's keys and values depend on the adapter: cards that differ in
    // LoRA cannot share them, so each then carries the shared tokens in its own prompt.
    bool same_lora = true;
    for (const TokenCard& c : cards) same_lora = same_lora && c.lora == cards.front().lora;
    const bool fold_shared = !same_lora && !shared_context.empty();
    std::vector<CardPrompt> prompts;
    for (std::size_t c = 0; c < cards.size(); ++c) {
        try {
            pack.sampling[c].validate();
            cards[c].lora.validate();
            if (cards[c].lora.enabled && !model_.lora())
                throw Error(ErrorCode::InvalidArgument, "LoRA is on but no adapter is loaded");
        } catch (const Error& e) {
            throw Error(e.code(), "card " + std::to_string(c + 1) + ": " + e.what());
        }
        pack.lora.push_back(cards[c].lora);
        std::vector<TokenId> prompt = cards[c].prompt;
        if (fold_shared) prompt.insert(prompt.begin(), shared_context.begin(), shared_context.end());
        prompts.push_back({std::move(prompt), pack.sampling[c].max_new_tokens});
    }
    pack.plan = build_pack_plan(prompts, fold_shared ? std::vector<TokenId>{} : shared_context, limits());
    return pack;
}

LoraMode Generator::lora_mode(const PreparedPack& pack) const {
    const bool any = std::any_of(pack.lora.begin(), pack.lora.end(), [](const LoraUse& u) { return u.enabled; });
    if (!any) return LoraMode::Off;
    const bool uniform = std::all_of(pack.lora.begin(), pack.lora.end(),
                                     [&](const LoraUse& u) { return u == pack.lora.front(); });
    return uniform && mutable_model_ && model_.lora_mergeable() ? LoraMode::Merged : LoraMode::PerCard;
}

GenerationResult Generator::run(const PreparedPack& pack, const RunOptions& options) const {
    const auto t_start = Clock::now();
    const PackPlan& plan = pack.plan;
    const std::int32_t n_cards = plan.cards();
    const std::int64_t vocab = model_.config().vocab_size;
    if (!pack.lora.empty() && static_cast<std::int32_t>(pack.lora.size()) != n_cards)
        throw Error(ErrorCode::InvalidArgument, "the pack's LoRA settings do not match its cards");

    // LoRA: merge for a uniform run, otherwise the base weights plus per-row updates.
    const LoraMode lora_mode = this->lora_mode(pack);
    if (mutable_model_) {
        if (lora_mode == LoraMode::Merged) mutable_model_->merge_lora(pack.lora.front().scale);
        else mutable_model_->unmerge_lora();
    } else if (model_.merged_lora_scale()) {
        throw Error(ErrorCode::InvalidArgument, "the model has a LoRA adapter merged in; run with a generator that may unmerge it");
    }
    auto row_lora = [&](std::int32_t card) {
        const LoraUse& u = pack.lora[static_cast<std::size_t>(card)];
        return u.enabled ? u.scale : 0.0f;
    };

    const std::vector<TokenId> eos = end_ids(model_, tokenizer_);
    const std::int64_t sampled_vocab = tokenizer_ ? std::min<std::int64_t>(vocab, tokenizer_->vocab_size()) : vocab;
    PlannerOptions planner_options;
    if (!options.ignore_end_of_sequence) planner_options.end_of_sequence = eos;
    Planner planner(plan, planner_options);

    std::vector<Sampler> samplers;
    std::vector<std::unique_ptr<StreamDecoder>> decoders;
    GenerationResult result;
    result.cards.resize(static_cast<std::size_t>(n_cards));
    for (std::int32_t c = 0; c < n_cards; ++c) {
        samplers.emplace_back(pack.sampling[static_cast<std::size_t>(c)]);
        CardResult& r = result.cards[static_cast<std::size_t>(c)];
        r.seed = samplers.back().seed();
        r.temperature = pack.sampling[static_cast<std::size_t>(c)].temperature_or_default();
        r.stats.prompt_tokens = plan.card(c).length();
        if (tokenizer_) {
            decoders.push_back(std::make_unique<StreamDecoder>(
                *tokenizer_, pack.sampling[static_cast<std::size_t>(c)].stop_strings));
        }
    }

    KvCache cache = model_.make_cache(plan.cache_slots);
    result.cache_bytes = cache.bytes();
    result.prefill_tokens = plan.rows();

    std::vector<double> first_token_s(static_cast<std::size_t>(n_cards), -1.0);
    double decode_start_s = 0.0;
    std::int64_t decode_tokens = 0;
    std::vector<float> scratch(static_cast<std::size_t>(vocab));

    while (!planner.done()) {
        if (options.cancel) {
            if (options.cancel->all()) planner.request_cancel_all();
            for (std::int32_t c = 0; c < n_cards; ++c) {
                if (options.cancel->card(static_cast<std::size_t>(c))) planner.request_cancel(c);
            }
        }
        const auto t_step = Clock::now();
        const StepPlan step = planner.next_step();
        StepEvent event;
        event.step = step.index;
        event.kind = step.kind;
        event.active_cards = static_cast<std::int32_t>(step.rows.size());
        event.lora_mode = lora_mode;

        std::vector<SampleResult> samples;
        std::vector<TokenDetail> details;  // per row of this step (options.logprobs > 0)
        if (!step.rows.empty()) {
            ForwardBatch batch;
            if (step.kind == StepKind::Prefill) {
                batch.tokens = widen(plan.tokens);
                batch.positions = plan.positions;
                batch.slots = plan.slots;
                batch.kv_len = step.kv_len;
                if (options.dense_mask) {  // the reference path (tests, benchmarks)
                    batch.mask = prefill_slot_mask(plan);
                } else {
                    // Each row reads the shared context and its own card's slots up to
                    // itself: the forward attends per card, never over the whole pack.
                    batch.reads.resize(batch.tokens.size());
                    for (const PackSegment& seg : plan.segment_table) {
                        const std::int64_t shared_end = seg.segment == PackPlan::kSharedSegment ? 0 : plan.shared_length;
                        for (std::int64_t r = seg.row_begin; r < seg.row_end; ++r)
                            batch.reads[static_cast<std::size_t>(r)] = {shared_end, seg.slot_begin, plan.slots[r] + 1};
                    }
                }
                if (lora_mode == LoraMode::PerCard) {
                    // Shared rows exist only when every card has the same LoRA use.
                    for (std::int32_t seg : plan.segments) batch.lora_scales.push_back(row_lora(seg < 0 ? 0 : seg));
                }
            } else {
                // Each card reads only the shared context and its own region (not the
                // whole pack): the forward gathers exactly those slots.
                for (const StepRow& row : step.rows) {
                    batch.tokens.push_back(row.token);
                    batch.positions.push_back(row.position);
                    batch.slots.push_back(row.slot);
                    batch.reads.push_back({step.shared_length, row.read_begin, row.slot + 1});
                    if (lora_mode == LoraMode::PerCard) batch.lora_scales.push_back(row_lora(row.card));
                }
                batch.kv_len = step.kv_len;
                if (options.dense_mask) {  // the reference path (tests, benchmarks)
                    batch.reads.clear();
                    batch.mask = step_slot_mask(step);
                }
            }
            for (const StepRow& row : step.rows) batch.output_rows.push_back(row.output_row);

            at::Tensor logits = model_.forward(batch, cache).to(at::kCPU).contiguous();  // [rows, V] fp32
            const float* base = logits.data_ptr<float>();
            for (std::size_t i = 0; i < step.rows.size(); ++i) {
                const std::int32_t c = step.rows[i].card;
                CardResult& r = result.cards[static_cast<std::size_t>(c)];
                std::copy(base + i * vocab, base + (i + 1) * vocab, scratch.begin());
                if (options.keep_logits) r.logits.emplace_back(scratch.begin(), scratch.end());
                // Ids past the tokenizer's vocabulary (the padding rows some models add to
                // their embedding, e.g. Qwen's 151936 for ~151665 tokens) have no text:
                // never sampled, never offered as alternatives.
                if (sampled_vocab < vocab)
                    std::fill(scratch.begin() + sampled_vocab, scratch.end(), std::numeric_limits<float>::lowest());
                LogitSummary summary;
                if (options.logprobs > 0) {
                    summary = summarize_logits(scratch.data(), scratch.size(), options.logprobs);
                    r.logprobs.push_back(summary.top);
                }
                if (options.ignore_end_of_sequence) {
                    for (TokenId id : eos) {
                        if (id >= 0 && id < vocab) scratch[static_cast<std::size_t>(id)] = std::numeric_limits<float>::lowest();
                    }
                }
                // The history (shared context + prompt + answer) is copied only for the
                // repetition penalty, its one reader: not on every step of every card.
                Sampler& sampler = samplers[static_cast<std::size_t>(c)];
                const std::vector<TokenId> history =
                    sampler.settings().repetition_penalty != 1.0f ? planner.history(c) : std::vector<TokenId>{};
                samples.push_back(sampler.sample(scratch.data(), scratch.size(), history));
                if (options.logprobs > 0) {
                    // The chosen token's log-probability from the row as the model gave
                    // it (`scratch` now holds the sampler's penalised, scaled copy).
                    TokenDetail d;
                    d.id = samples.back().token;
                    if (d.id >= 0 && d.id < vocab) {
                        const float chosen = base[i * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(d.id)];
                        d.logprob = static_cast<float>(static_cast<double>(chosen) - summary.log_z);
                    }
                    d.entropy = static_cast<float>(summary.entropy);
                    for (const auto& [id, lp] : r.logprobs.back()) d.top.push_back({id, std::string(), lp});
                    details.push_back(std::move(d));
                }
            }
            planner.accept(step, samples);
        }

        const double now_s = seconds_since(t_start);
        if (step.kind == StepKind::Prefill) {
            result.prefill_s = now_s;
            decode_start_s = now_s;
        }
        for (std::size_t i = 0; i < step.rows.size(); ++i) {
            const std::int32_t c = step.rows[i].card;
            const CardProgress& progress = planner.card(c);
            CardResult& r = result.cards[static_cast<std::size_t>(c)];
            CardUpdate update;
            update.card = c;
            // The planner keeps every sampled token except an end-of-sequence id.
            if (progress.generated.size() > r.tokens.size()) {
                const TokenId token = progress.generated.back();
                r.tokens.push_back(token);
                update.tokens.push_back(token);
                if (!details.empty()) {
                    // Text only for the tokens kept: an end-of-sequence step has none.
                    TokenDetail& d = details[i];
                    if (tokenizer_) {
                        d.piece = token_display_text(tokenizer_->token_bytes(d.id));
                        for (TokenAlternative& a : d.top) a.piece = token_display_text(tokenizer_->token_bytes(a.id));
                    }
                    r.details.push_back(std::move(d));
                }
                ++decode_tokens;
                if (first_token_s[static_cast<std::size_t>(c)] < 0) first_token_s[static_cast<std::size_t>(c)] = now_s;
                if (!decoders.empty()) {
                    StreamDecoder& d = *decoders[static_cast<std::size_t>(c)];
                    update.text = d.push(token);
                    if (d.stopped()) {
                        r.matched_stop = d.matched_stop();
                        planner.report_stop_string(c);
                    }
                }
            }
            event.updates.push_back(std::move(update));
        }
        for (std::int32_t c : planner.take_finished()) {
            CardResult& r = result.cards[static_cast<std::size_t>(c)];
            r.finish = *planner.card(c).finish;
            auto it = std::find_if(event.updates.begin(), event.updates.end(),
                                   [c](const CardUpdate& u) { return u.card == c; });
            if (it == event.updates.end()) {
                event.updates.push_back(CardUpdate{});
                it = std::prev(event.updates.end());
                it->card = c;
            }
            if (!decoders.empty() && !decoders[static_cast<std::size_t>(c)]->stopped()) {
                it->text += decoders[static_cast<std::size_t>(c)]->flush();
            }
            it->finished = r.finish;
        }
        for (CardUpdate& u : event.updates) {
            CardResult& r = result.cards[static_cast<std::size_t>(u.card)];
            r.text += u.text;
            r.stats.generated_tokens = static_cast<std::int64_t>(r.tokens.size());
            const double first = first_token_s[static_cast<std::size_t>(u.card)];
            r.stats.time_to_first_token_s = first < 0 ? 0.0 : first;
            const double span = now_s - first;
            r.stats.tokens_per_s = (first >= 0 && span > 0 && r.tokens.size() > 1)
                                       ? static_cast<double>(r.tokens.size() - 1) / span
                                       : 0.0;
            u.stats = r.stats;
        }
        event.step_s = seconds_since(t_step);
        event.elapsed_s = seconds_since(t_start);
        const double decode_s = event.elapsed_s - decode_start_s;
        event.aggregate_tokens_per_s =
            decode_s > 0 && step.kind == StepKind::Decode ? static_cast<double>(decode_tokens) / decode_s : 0.0;
        ++result.steps;
        if (options.on_step) options.on_step(event);
    }
    result.total_s = seconds_since(t_start);
    result.lora_mode = lora_mode;
    return result;
}

}  // namespace kev
