#include "engine_worker.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>

#include <algorithm>

#include <exception>

#include "kev/answer_engine.h"
#include "kev/error.h"
#include "kev/file_hash.h"
#include "kev/kv_cache.h"
#include "kev/quant.h"
#include "kev/session.h"

namespace kevui {

namespace {

QString messageOf(const std::exception& e) { return QString::fromStdString(e.what()); }

// What the weights are held as: the 4-bit formats present (and whether they multiply
// int8-quantized activations, kev/quant.h), then the dense dtype.
QString weightFormats(const kev::WeightMemory& m, kev::DType dtype) {
    QStringList parts;
    if (m.q4_0) parts << QStringLiteral("q4_0");
    if (m.q4_1) parts << QStringLiteral("q4_1");
    if (m.q4_k) parts << QStringLiteral("q4_k");
    if (m.q8_0) parts << QStringLiteral("q8_0");
    if (m.q5_k) parts << QStringLiteral("q5_k");
    if (m.q6_k) parts << QStringLiteral("q6_k");
    if (m.nf4) parts << QStringLiteral("nf4");
    const QString dense = QString::fromLatin1(kev::to_string(dtype));
    if (parts.isEmpty()) return dense;
    const QString int8 = m.int8_kernel == m.quantized() ? QStringLiteral(" × int8 activations")
                         : m.int8_kernel > 0            ? QStringLiteral(" (partly × int8 activations)")
                                                        : QString();
    return parts.join(QStringLiteral(" + ")) + int8 + QStringLiteral(", ") + dense;
}

}  // namespace

void registerEngineTypes() {
    qRegisterMetaType<kevui::LoadSettings>("kevui::LoadSettings");
    qRegisterMetaType<kevui::ModelInfo>("kevui::ModelInfo");
    qRegisterMetaType<kevui::PackPreview>("kevui::PackPreview");
    qRegisterMetaType<kevui::RunHandle>("kevui::RunHandle");
    qRegisterMetaType<kevui::RunId>("kevui::RunId");
    qRegisterMetaType<kev::GenerationRequest>("kev::GenerationRequest");
    qRegisterMetaType<kev::StepEvent>("kev::StepEvent");
    qRegisterMetaType<kev::GenerationResult>("kev::GenerationResult");
    qRegisterMetaType<QVector<int>>("QVector<int>");
    qRegisterMetaType<kevui::SessionHandle>("kevui::SessionHandle");
}

// ---- ModelLoader (loader thread) ----------------------------------------------------

namespace {

// What changes when a model file (or a folder's files) is rewritten: sizes and
// modification times (to the millisecond).
QString fileStamp(const QString& path) {
    const QFileInfo info(path);
    const auto one = [](const QFileInfo& f) {
        return QStringLiteral("%1:%2:%3;").arg(f.fileName()).arg(f.size()).arg(f.lastModified().toMSecsSinceEpoch());
    };
    if (!info.isDir()) return one(info);
    QString stamp;
    for (const QFileInfo& f : QDir(path).entryInfoList(QDir::Files, QDir::Name)) stamp += one(f);
    return stamp;
}

}  // namespace

ModelLoader::ModelLoader(std::shared_ptr<std::atomic<bool>> loadCancel) : loadCancel_(std::move(loadCancel)) {}

void ModelLoader::load(const QString& path, const LoadSettings& settings) {
    kev::SessionOptions options;
    options.load.device = settings.device;
    options.load.dtype = settings.dtype;
    options.load.quant = settings.quant;
    options.load.progress = [this](int done, int total) {
        // Thrown through the loader: Session::open leaves nothing half-made behind.
        if (loadCancel_->load()) throw kev::Error(kev::ErrorCode::Cancelled, "Loading cancelled");
        Q_EMIT loadProgress(done, total);
    };
    try {
        SessionHandle session = kev::Session::open(path.toStdString(), options);
        const kev::ModelConfig& config = session->model().config();
        ModelInfo info;
        info.path = path;
        info.name = QFileInfo(path).fileName();
        info.architecture = QString::fromLatin1(kev::to_string(config.arch));
        info.device = settings.device;
        info.dtype = settings.dtype;
        const kev::WeightMemory memory = session->model().weights().memory();
        info.weightBytes = memory.total();
        info.quant = settings.quant;
        info.weightBytes4Bit = memory.quantized();
        info.weightFormats = weightFormats(memory, settings.dtype);
        info.parameters = config.parameter_count();
        const qint64 h = config.hidden_size;
        info.shape.embedding = config.vocab_size * h;
        info.shape.linear = config.num_layers * (2 * h * config.q_size() + 2 * h * config.kv_size() +
                                                 3 * h * config.intermediate_size) +
                            (config.tie_word_embeddings ? 0 : info.shape.embedding);
        info.shape.other = std::max<qint64>(0, info.parameters - info.shape.linear - info.shape.embedding);
        info.shape.tiedHead = config.tie_word_embeddings;
        if (config.tie_word_embeddings && settings.device == kev::Device::Cpu) {
            try {  // the header again, for the menu's 4-bit figure; the model is loaded either way
                info.shape.keptEmbeddingBytes = kev::kept_embedding_bytes(path.toStdString());
            } catch (const std::exception&) {
                info.shape.keptEmbeddingBytes = 0;  // replaced since the load: the plain estimate
            }
        }
        info.contextLength = config.max_positions;
        info.kvBytesPerSlot = kev::KvCache::bytes_per_slot(config, settings.dtype);
        info.loadSeconds = session->load_seconds();
        info.chatNote = QString::fromStdString(session->chat_error());
        if (session->chat()) info.defaultSystem = QString::fromStdString(session->chat()->default_system());
        Q_EMIT loaded(session, info);  // the worker's current session stays when a load fails
    } catch (const std::exception& e) {
        Q_EMIT loadFailed(path, messageOf(e));
        return;
    }
    // The file's hash ties answers to the exact weights; it reads the whole file, so it
    // comes after the model is already answering.
    const QString stamp = fileStamp(path);
    if (const auto it = known_.constFind(path); it != known_.cend() && it->stamp == stamp) {
        Q_EMIT hashed(path, it->sha256, it->bytes);
        return;
    }
    try {
        const kev::ModelDigest d = kev::model_digest(path.toStdString());
        const KnownHash h{stamp, QString::fromStdString(d.sha256), static_cast<qint64>(d.bytes)};
        known_.insert(path, h);
        Q_EMIT hashed(path, h.sha256, h.bytes);
    } catch (const std::exception&) {
        // Unreadable now (moved, deleted): answers record no hash rather than a wrong one.
    }
}

// ---- EngineWorker (worker thread) ---------------------------------------------------

namespace {
// What the prefix cache may hold: KEV_PREFIX_CACHE_MB, else 512 MiB (0 keeps nothing).
std::int64_t prefixCacheBudget() {
    bool ok = false;
    const qint64 mb = qEnvironmentVariableIntValue("KEV_PREFIX_CACHE_MB", &ok);
    return (ok && mb >= 0 ? mb : 512) << 20;
}
}  // namespace

EngineWorker::EngineWorker() : prefixCache_(std::make_unique<kev::PrefixCache>(prefixCacheBudget())) {}

EngineWorker::~EngineWorker() = default;

void EngineWorker::adopt(const SessionHandle& session, const ModelInfo& info) {
    session_ = session;
    info_ = info;
    prefixCache_->clear();  // another model (it may even sit at the old one's address)
    Q_EMIT modelLoaded(info);
}

PackPreview EngineWorker::makePreview(const kev::PreparedPack& pack,
                                      const QVector<int>& cardOfRequest) const {
    PackPreview p;
    p.plan = pack.plan;
    p.cardOfRequest = cardOfRequest;
    p.kvEstimateBytes = pack.plan.cache_slots * info_.kvBytesPerSlot;
    for (const std::string& prompt : pack.prompts) p.prompts.push_back(QString::fromStdString(prompt));
    const kev::Tokenizer& tok = session_->tokenizer();
    p.rowPieces.reserve(static_cast<int>(pack.plan.tokens.size()));
    for (kev::TokenId id : pack.plan.tokens) {
        p.rowPieces.push_back(QString::fromStdString(tok.decode({id}, kev::SpecialText::Show)));
    }
    return p;
}

void EngineWorker::run(RunId id, const kev::GenerationRequest& request, const RunHandle& control,
                       const QVector<int>& cardOfRequest) {
    if (!session_) {
        Q_EMIT runFailed(id, QStringLiteral("No model is loaded"));
        return;
    }
    const bool wantsLora = std::any_of(request.cards.begin(), request.cards.end(),
                                       [](const kev::CardRequest& c) { return c.lora.enabled; });
    if (wantsLora && !session_->lora() && !loraError_.isEmpty()) {
        Q_EMIT runFailed(id, QStringLiteral("the LoRA adapter could not be used: %1").arg(loraError_));
        return;
    }
    // request.logprobs > 0: token details for the comparison view. The answers' text is
    // what the cards already show; the token ids stay for replay.
    kev::TemperatureDefaults defaults;
    try {
        defaults = kev::temperature_defaults_from_env();  // KEV_TEMPERATURE may be malformed
    } catch (const std::exception& e) {
        Q_EMIT runFailed(id, messageOf(e));
        return;
    }
    kev::LocalEngine engine(*session_, defaults, prefixCache_.get());
    answer(id, engine, request, control,
           [&](const kev::PreparedPack& pack) { Q_EMIT runStarted(id, makePreview(pack, cardOfRequest)); });
}

void EngineWorker::preview(quint64 id, const kev::GenerationRequest& request,
                           const QVector<int>& cardOfRequest) {
    if (!session_) return;
    try {
        const kev::PreparedPack pack = session_->generator().prepare(request);
        Q_EMIT previewReady(id, makePreview(pack, cardOfRequest));
    } catch (const std::exception& e) {
        Q_EMIT previewFailed(id, messageOf(e));
    }
}

void EngineWorker::setLora(const QString& path) {
    if (!session_) return;
    if (session_->lora() && QString::fromStdString(session_->lora()->path) == path) return;
    try {
        session_->load_lora(path.toStdString());
        loraError_.clear();
    } catch (const std::exception& e) {
        // Runs that want LoRA now fail with this reason instead of using the old adapter.
        session_->clear_lora();
        loraError_ = messageOf(e);
        Q_EMIT loraFailed(path, loraError_);
    }
}

// ---- EngineHost (UI thread) ---------------------------------------------------------

EngineHost::EngineHost(QObject* parent)
    : EngineLane(parent), loadCancel_(std::make_shared<std::atomic<bool>>(false)) {
    registerEngineTypes();
    thread_.setObjectName(QStringLiteral("kev-engine"));
    worker_ = new EngineWorker;
    worker_->moveToThread(&thread_);
    loaderThread_.setObjectName(QStringLiteral("kev-loader"));
    loader_ = new ModelLoader(loadCancel_);
    loader_->moveToThread(&loaderThread_);

    connect(this, &EngineHost::requestLoad, loader_, &ModelLoader::load);
    connect(loader_, &ModelLoader::loaded, worker_, &EngineWorker::adopt);
    connect(this, &EngineHost::requestRun, worker_, &EngineWorker::run);
    connect(this, &EngineHost::requestPreview, worker_, &EngineWorker::preview);
    connect(this, &EngineHost::requestLora, worker_, &EngineWorker::setLora);
    connect(worker_, &EngineWorker::loraFailed, this, &EngineHost::loraFailed);

    connect(loader_, &ModelLoader::loadProgress, this, &EngineHost::loadProgress);
    connect(worker_, &EngineWorker::modelLoaded, this, [this](const ModelInfo& info) {
        loading_ = false;
        hasModel_ = true;
        model_ = info;
        model_.sha256 = hashes_.value(info.path).sha256;
        model_.fileBytes = hashes_.value(info.path).bytes;
        Q_EMIT modelLoaded(info);
    });
    connect(loader_, &ModelLoader::hashed, this, [this](const QString& path, const QString& sha256, qint64 bytes) {
        // It may arrive before the worker has adopted the model it belongs to.
        hashes_[path] = Hash{sha256, bytes};
        if (!hasModel_ || model_.path != path) return;
        model_.sha256 = sha256;
        model_.fileBytes = bytes;
        Q_EMIT modelHashed(sha256);
    });
    connect(loader_, &ModelLoader::loadFailed, this, [this](const QString& path, const QString& message) {
        loading_ = false;
        Q_EMIT loadFailed(path, message);
    });
    relay(worker_);
    connect(worker_, &EngineWorker::previewReady, this, [this](quint64 id, const PackPreview& pack) {
        if (id == wantedPreview_) Q_EMIT previewReady(pack);
    });
    connect(worker_, &EngineWorker::previewFailed, this, [this](quint64 id, const QString& message) {
        if (id == wantedPreview_) Q_EMIT previewFailed(message);
    });
    thread_.start();
    loaderThread_.start();
}

EngineHost::~EngineHost() {
    loadCancel_->store(true);
    cancel();
    loaderThread_.quit();
    loaderThread_.wait();
    delete loader_;
    thread_.quit();
    thread_.wait();
    delete worker_;  // its thread has ended: safe to destroy from here
}

void EngineHost::load(const QString& path, const LoadSettings& settings) {
    loading_ = true;
    loadCancel_->store(false);  // here, not on the worker: a cancel right after load() counts
    hashes_.remove(path);       // the file may have changed since: hashed again after the load
    Q_EMIT requestLoad(path, settings);
}

void EngineHost::cancelLoad() { loadCancel_->store(true); }

void EngineHost::start(RunId id, const kev::GenerationRequest& request, const RunHandle& control,
                       const QVector<int>& cardOfRequest) {
    Q_EMIT requestRun(id, request, control, cardOfRequest);
}

void EngineHost::preview(const kev::GenerationRequest& request, const QVector<int>& cardOfRequest) {
    wantedPreview_ = nextPreview_++;
    Q_EMIT requestPreview(wantedPreview_, request, cardOfRequest);
}

}  // namespace kevui
