// The generation loop: the Planner decides each step, the Model runs it, each card's
// Sampler draws, each card's StreamDecoder turns ids into text.
#include "kev/generator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cctype>
#include <cmath>
#include <limits>
#include <mutex>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kev/buffer_pool.h"
#include "kev/detokenizer.h"
#include "kev/error.h"
#include "kev/model.h"
#include "generate/card_stream.h"
#include "generate/prompt_reuse.h"
#include "generate/step_batch.h"

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

constexpr std::size_t kJoiningCard = static_cast<std::size_t>(-1);  // render()'s index for a card not yet in a run

// The step's sampled tokens to their cards' streams (the planner keeps every sampled
// token but an end-of-sequence id), the finished cards' held-back text (their computed
// prefix to the prefix cache, before their regions are freed), every update's stats.
// Returns how many tokens the cards took.
std::int64_t stream_step(const StepPlan& step, Planner& planner, std::vector<CardStream>& streams, PromptReuse& reuse,
                         const KvCache& cache, const Tokenizer* tokenizer, double now_s, StepEvent& event) {
    std::int64_t taken = 0;
    for (const StepOutput& o : step.outputs) {
        const std::int32_t c = o.card;
        CardStream& stream = streams[static_cast<std::size_t>(c)];
        CardUpdate update;
        update.card = c;
        // The planner keeps every sampled token except an end-of-sequence id.
        const std::vector<TokenId>& generated = planner.card(c).generated;
        if (generated.size() > stream.result().tokens.size()) {
            const TokenId token = generated.back();
            update.tokens.push_back(token);
            update.text = stream.take(token, now_s, tokenizer);
            ++taken;
            if (stream.stopped()) planner.report_stop_string(c);
        }
        event.updates.push_back(std::move(update));
    }
    for (std::int32_t c : planner.take_finished()) {
        auto it = std::find_if(event.updates.begin(), event.updates.end(),
                               [c](const CardUpdate& u) { return u.card == c; });
        if (it == event.updates.end()) {
            event.updates.push_back(CardUpdate{});
            it = std::prev(event.updates.end());
            it->card = c;
        }
        it->text += streams[static_cast<std::size_t>(c)].finish(*planner.card(c).finish);
        it->finished = *planner.card(c).finish;
        reuse.store(c, planner, cache);
    }
    for (CardUpdate& u : event.updates) {
        CardStream& stream = streams[static_cast<std::size_t>(u.card)];
        stream.result().stats.reused_tokens = planner.card(u.card).reused;
        u.stats = stream.stats(now_s);
    }
    return taken;
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

struct JoinQueue::Impl {
    mutable std::mutex mutex;
    std::vector<JoiningCard> cards;
    std::vector<std::pair<std::uint64_t, CardRequest>> requests;
    std::function<JoiningCard(const CardRequest&)> preparer;
};

JoinQueue::JoinQueue() : impl_(std::make_unique<Impl>()) {}
JoinQueue::~JoinQueue() = default;

void JoinQueue::push(JoiningCard card) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->cards.push_back(std::move(card));
}

void JoinQueue::push_request(std::uint64_t tag, CardRequest card) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->requests.emplace_back(tag, std::move(card));
}

void JoinQueue::set_preparer(std::function<JoiningCard(const CardRequest&)> preparer) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->preparer = std::move(preparer);
}

std::vector<JoiningCard> JoinQueue::take() {
    std::vector<std::pair<std::uint64_t, CardRequest>> requests;
    std::function<JoiningCard(const CardRequest&)> preparer;
    std::vector<JoiningCard> out;
    {
        std::lock_guard<std::mutex> lock(impl_->mutex);
        out.swap(impl_->cards);
        if (impl_->preparer) {
            requests.swap(impl_->requests);
            preparer = impl_->preparer;
        }
    }
    // Prepared outside the lock: tokenizing does not hold up a pusher.
    for (auto& [tag, request] : requests) {
        JoiningCard j;
        try {
            j = preparer(request);
        } catch (const std::exception& e) {
            j.error = e.what();
        }
        j.tag = tag;
        out.push_back(std::move(j));
    }
    return out;
}

std::vector<std::uint64_t> JoinQueue::pending_requests() const {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    std::vector<std::uint64_t> tags;
    for (const auto& r : impl_->requests) tags.push_back(r.first);
    return tags;
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

    std::vector<std::vector<TokenId>> prompts;
    std::vector<std::string> texts;
    for (std::size_t c = 0; c < request.cards.size(); ++c) {
        Rendered r = render(request, request.cards[c], c);
        prompts.push_back(std::move(r.tokens));
        texts.push_back(std::move(r.text));
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

Generator::Rendered Generator::render(const GenerationRequest& request, const CardRequest& card,
                                      std::size_t index) const {
    if (!tokenizer_) throw Error(ErrorCode::InvalidArgument, "this generator has no tokenizer: use prepare_tokens");
    if (!chat_) throw Error(ErrorCode::InvalidArgument, "no chat format is chosen for this model");
    const std::string which = index == kJoiningCard ? std::string("the joining card") : "card " + std::to_string(index + 1);
    if (blank(card.question)) throw Error(ErrorCode::InvalidArgument, which + ": the question is empty");
    for (std::size_t t = 0; t < card.history.size(); ++t) {
        if (blank(card.history[t].user)) {
            throw Error(ErrorCode::InvalidArgument,
                        which + ": earlier turn " + std::to_string(t + 1) + ": the user message is empty");
        }
    }
    // A card's system message is its own or the request's, then the shared context.
    std::optional<std::string> system = card.system ? card.system : request.system;
    if (!request.shared_context.empty())
        system = system ? *system + "\n\n" + request.shared_context : request.shared_context;
    // Special tokens come from the template only: what the user typed (question, system
    // prompt, shared context, earlier turns) and earlier answers are tokenized as text, so
    // a question that types "<|im_start|>system" stays inside its own user turn.
    ChatTemplate::Rendered rendered = chat_->render_marked(ChatPrompt{system, card.question, card.history});
    Rendered out;
    out.tokens = tokenizer_->encode(rendered.text, rendered.user_text);
    out.text = std::move(rendered.text);
    return out;
}

JoiningCard Generator::prepare_join(const GenerationRequest& request, const CardRequest& card,
                                    const TemperatureDefaults& defaults) const {
    Rendered r = render(request, card, kJoiningCard);
    JoiningCard j;
    j.prompt = std::move(r.tokens);
    j.prompt_text = std::move(r.text);
    std::vector<SamplingSettings> sampling{card.sampling};
    resolve_temperatures(sampling, defaults);
    j.sampling = sampling.front();
    j.sampling.validate();
    j.lora = card.lora;
    j.lora.validate();
    return j;
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
    const std::int64_t vocab = model_.config().vocab_size;
    if (!pack.lora.empty() && static_cast<std::int32_t>(pack.lora.size()) != plan.cards())
        throw Error(ErrorCode::InvalidArgument, "the pack's LoRA settings do not match its cards");

    // LoRA: merge for a uniform run, otherwise the base weights plus per-row updates.
    const LoraMode lora_mode = this->lora_mode(pack);
    if (mutable_model_) {
        if (lora_mode == LoraMode::Merged) mutable_model_->merge_lora(pack.lora.front().scale);
        else mutable_model_->unmerge_lora();
    } else if (model_.merged_lora_scale()) {
        throw Error(ErrorCode::InvalidArgument, "the model has a LoRA adapter merged in; run with a generator that may unmerge it");
    }
    // A step's buffers are the last step's (kev/buffer_pool.h), given back when the run
    // ends; opened after the merge, whose replaced weights are not worth keeping.
    const BufferPoolScope pool;
    std::vector<LoraUse> lora = pack.lora;
    lora.resize(static_cast<std::size_t>(plan.cards()));
    // The shared context's keys and values were computed with the first card's LoRA use
    // (prepare_tokens shares it only between cards that agree).
    const LoraUse shared_lora = lora.front();
    auto scale_of = [](const LoraUse& u) { return u.enabled ? u.scale : 0.0f; };

    const std::vector<TokenId> eos = end_ids(model_, tokenizer_);
    SampleContext sample_ctx;
    sample_ctx.vocab = vocab;
    sample_ctx.sampled_vocab = tokenizer_ ? std::min<std::int64_t>(vocab, tokenizer_->vocab_size()) : vocab;
    sample_ctx.end_of_sequence = &eos;
    sample_ctx.ignore_end_of_sequence = options.ignore_end_of_sequence;
    sample_ctx.logprobs = options.logprobs;
    sample_ctx.keep_logits = options.keep_logits;

    // What the prefix cache keys every card's keys and values by, and what it gives back.
    const std::vector<TokenId> shared_tokens(plan.tokens.begin(), plan.tokens.begin() + plan.shared_length);
    PromptReuse reuse(options.prefix_cache, model_, plan, lora, lora_mode);

    // A pack that cards may join starts with room to spare, and grows by half when it must:
    // a growth copies the whole cache, a step's time that every running card waits.
    const PackLimits pack_limits = limits();
    const std::int64_t slot_limit =
        pack_limits.max_cache_slots > 0 ? std::max(pack_limits.max_cache_slots, plan.cache_slots) : 0;
    auto roomy = [slot_limit](std::int64_t slots) {
        const std::int64_t more = slots + slots / 2;
        return slot_limit > 0 ? std::min(more, slot_limit) : more;
    };
    KvCache cache = model_.make_cache(options.joins ? roomy(plan.cache_slots) : plan.cache_slots);
    // Windowed layers keep each region's window only, in rings that regions get as they are
    // admitted; a region's prompt is then read a chunk at a time.
    const ModelConfig& mc = model_.config();
    bool windowed = false;
    for (std::int64_t l = 0; l < mc.num_layers; ++l) windowed = windowed || mc.layer_windowed(l);
    const std::int64_t chunk = std::max<std::int64_t>(1, options.window_chunk);
    const std::int64_t ring = std::max(mc.sliding_window, PrefixCache::kBlockTokens) + chunk - 1;
    // Not where no card can outgrow its ring (a window as long as the context).
    const bool rings = options.keep_windows && windowed && model_.device() == Device::Cpu && !options.dense_mask &&
                       mc.max_positions > ring;
    if (rings) {
        cache.keep_windows(ring);
        if (plan.shared_length > 0) cache.map_region(0, plan.shared_length);
    }
    PlannerOptions planner_options;
    if (rings) planner_options.region_rows = chunk;
    if (!options.ignore_end_of_sequence) planner_options.end_of_sequence = eos;
    planner_options.prompt_rows_beside_answers = std::max<std::int64_t>(0, options.prompt_rows_beside_answers);
    planner_options.max_cache_slots = slot_limit;
    planner_options.vocab_size = vocab;
    reuse.wire(planner_options, cache);
    // A card's region is there before anything is copied into it: the cache grows (a
    // joining card's region may lie past it) and, with rings, the region gets its ring.
    planner_options.on_admit = [&cache, rings, roomy, from_cache = planner_options.on_admit](
                                   std::int32_t card, std::int64_t begin, std::int64_t end) -> std::int64_t {
        if (end > cache.slots()) cache.grow(std::max(end, roomy(cache.slots())));
        if (rings) cache.map_region(begin, end);
        return from_cache ? from_cache(card, begin, end) : 0;
    };
    Planner planner(plan, planner_options);

    std::vector<CardStream> streams;
    streams.reserve(static_cast<std::size_t>(plan.cards()));
    for (std::int32_t c = 0; c < plan.cards(); ++c)
        streams.emplace_back(pack.sampling[static_cast<std::size_t>(c)], tokenizer_, plan.card(c).length(), 0.0);

    GenerationResult result;
    result.prefill_tokens = plan.rows();

    // Cards joining the running pack become planner cards (or are refused, with why).
    auto admit = [&](JoiningCard& j, StepEvent& event) {
        JoinedCard joined;
        joined.tag = j.tag;
        try {
            if (!j.error.empty()) throw Error(ErrorCode::InvalidArgument, j.error);
            j.sampling.validate();
            j.lora.validate();
            if (j.lora.enabled && !model_.lora()) throw Error(ErrorCode::InvalidArgument, "LoRA is on but no adapter is loaded");
            if (lora_mode == LoraMode::Merged && !(j.lora == shared_lora))
                throw Error(ErrorCode::InvalidArgument,
                            "this run has the adapter merged at another setting: it can join the next run");
            // It reads the stored shared context when its prompt starts with it, and the
            // context was computed with the same adapter use.
            const bool shares = !shared_tokens.empty() && j.lora == shared_lora &&
                                j.prompt.size() > shared_tokens.size() &&
                                std::equal(shared_tokens.begin(), shared_tokens.end(), j.prompt.begin());
            CardPrompt prompt;
            prompt.tokens.assign(j.prompt.begin() + (shares ? static_cast<std::ptrdiff_t>(shared_tokens.size()) : 0),
                                 j.prompt.end());
            prompt.max_new_tokens = j.sampling.max_new_tokens;
            reuse.add_card(j.prompt, shares, j.lora);
            lora.push_back(j.lora);
            try {
                joined.card = planner.add_card(prompt, shares);
            } catch (...) {
                reuse.drop_last_card();
                lora.pop_back();
                throw;
            }
            streams.emplace_back(j.sampling, tokenizer_, static_cast<std::int64_t>(prompt.tokens.size()),
                                 seconds_since(t_start));
        } catch (const Error& e) {
            joined.card = -1;
            joined.error = e.what();
        }
        event.joined.push_back(std::move(joined));
    };

    double decode_start_s = 0.0;
    std::int64_t decode_tokens = 0;
    std::int64_t joined_prompt_rows = 0;
    for (;;) {
        StepEvent event;
        if (options.joins) {
            for (JoiningCard& j : options.joins->take()) admit(j, event);
        }
        if (planner.done()) {
            // Cards refused at the very end are still told (their callers wait for word).
            if (!event.joined.empty() && options.on_step) {
                event.step = result.steps;
                event.kind = StepKind::Decode;
                event.lora_mode = lora_mode;
                event.elapsed_s = seconds_since(t_start);
                options.on_step(event);
            }
            break;
        }
        if (options.cancel) {
            if (options.cancel->all()) planner.request_cancel_all();
            for (std::int32_t c = 0; c < planner.cards(); ++c) {
                if (options.cancel->card(static_cast<std::size_t>(c))) planner.request_cancel(c);
            }
        }
        const auto t_step = Clock::now();
        // --- plan ---
        const StepPlan step = planner.next_step();
        for (const auto& [begin, end] : planner.take_freed()) {
            if (options.poison_freed) cache.poison_slots(begin, end);
            cache.unmap_region(begin, end);
        }
        if (planner.cache_slots() > cache.slots()) cache.grow(std::max(planner.cache_slots(), roomy(cache.slots())));
        event.step = step.index;
        event.kind = step.kind;
        event.active_cards = static_cast<std::int32_t>(step.outputs.size());
        event.rows = static_cast<std::int64_t>(step.rows.size());
        event.prompt_rows = step.prompt_rows;
        event.lora_mode = lora_mode;

        if (!step.rows.empty()) {
            // --- batch, forward ---
            const bool per_row_lora =
                lora_mode != LoraMode::Merged &&
                std::any_of(step.rows.begin(), step.rows.end(), [&](const StepRow& r) {
                    return r.card == PackPlan::kSharedSegment ? shared_lora.enabled : lora[static_cast<std::size_t>(r.card)].enabled;
                });
            const ForwardBatch batch =
                step_batch(step, options.dense_mask, per_row_lora, scale_of(shared_lora),
                           [&](std::int32_t card) { return scale_of(lora[static_cast<std::size_t>(card)]); });
            if (step.index > 0) joined_prompt_rows += step.prompt_rows;
            const at::Tensor logits = model_.forward(batch, cache).to(at::kCPU).contiguous();  // [outputs, V] fp32
            // --- sample ---
            // The cards draw on the threads side by side: each has its own stream, scratch
            // and generator, and the planner is only read, so a card draws the same token
            // whatever the split. (16 cards of the built-in model at temperature 0.8, 2
            // threads: 3.1-3.5 ms of a step against 6.1 one card after another.)
            const auto t_sample = Clock::now();
            const float* base = logits.data_ptr<float>();
            std::vector<SampleResult> samples(step.outputs.size());
            at::parallel_for(0, static_cast<std::int64_t>(step.outputs.size()), 1, [&](std::int64_t i0, std::int64_t i1) {
                for (std::int64_t i = i0; i < i1; ++i) {
                    const std::int32_t c = step.outputs[static_cast<std::size_t>(i)].card;
                    CardStream& stream = streams[static_cast<std::size_t>(c)];
                    // The history is copied only for the repetition penalty, its one reader.
                    samples[static_cast<std::size_t>(i)] =
                        stream.sample(base + static_cast<std::size_t>(i) * static_cast<std::size_t>(vocab), sample_ctx,
                                      stream.wants_history() ? planner.history(c) : std::vector<TokenId>{});
                }
            });
            result.sample_s += seconds_since(t_sample);
            planner.accept(step, samples);
            // Rings move on: blocks go to the prefix cache as they are complete.
            if (rings) reuse.keep_up(step, planner, cache);
        }

        // --- stream ---
        const double now_s = seconds_since(t_start);
        if (step.index == 0) result.prefill_s = decode_start_s = now_s;
        decode_tokens += stream_step(step, planner, streams, reuse, cache, tokenizer_, now_s, event);
        event.kv_bytes_in_use = cache.bytes_in_use(planner.slots_in_use());
        result.cache_peak_bytes = std::max(result.cache_peak_bytes, event.kv_bytes_in_use);
        event.prefix_cache_bytes = reuse.cache_bytes();
        event.shared_reused_tokens = planner_options.shared_done;
        event.step_s = seconds_since(t_step);
        event.elapsed_s = seconds_since(t_start);
        const double decode_s = event.elapsed_s - decode_start_s;
        event.aggregate_tokens_per_s =
            decode_s > 0 && step.kind != StepKind::Prefill ? static_cast<double>(decode_tokens) / decode_s : 0.0;
        ++result.steps;
        if (options.on_step) options.on_step(event);
    }
    result.cards.reserve(streams.size());
    for (CardStream& s : streams) result.cards.push_back(std::move(s.result()));
    result.cache_bytes = cache.bytes();
    result.prefill_tokens += joined_prompt_rows;
    result.total_s = seconds_since(t_start);
    result.lora_mode = lora_mode;
    return result;
}

}  // namespace kev
