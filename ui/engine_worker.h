// The engine on a background thread.
//
//   UI thread                          loader thread / worker thread
//   ---------                          -----------------------------
//   EngineHost::load() --queued-->     ModelLoader::load()   -> Session::open (quantizes)
//                                        --queued--> EngineWorker::adopt()  (between runs)
//   EngineHost::run()  --queued-->     EngineWorker::run()        -> Generator::run
//   EngineHost::cancel() sets an atomic the generation loop reads between steps
//                      <--queued--     stepArrived / runFinished / runFailed (with run id)
//
// Loading runs on its own thread, so the previous model keeps answering (runs, pack
// previews) until the new one - another file or another precision, re-prepared from
// the original file - is ready; the worker swaps it in between runs. The worker owns
// the session in use and is the only object that runs it. Every
// result carries the id of the run (or preview) it answers; EngineHost drops the ones
// that answer a request the window no longer waits for. Widgets never see a tensor.
#pragma once

#include <QHash>
#include <QObject>
#include <QThread>

#include <atomic>
#include <memory>

#include "engine_lane.h"
#include "engine_types.h"

namespace kev {
class Session;
}

namespace kevui {

using SessionHandle = std::shared_ptr<kev::Session>;

// Opens models (reading, converting, quantizing the weights) on the loader thread.
class ModelLoader : public QObject {
    Q_OBJECT
public:
    // `loadCancel` is read from the loader thread while a model loads.
    explicit ModelLoader(std::shared_ptr<std::atomic<bool>> loadCancel);

public Q_SLOTS:
    void load(const QString& path, const kevui::LoadSettings& settings);

Q_SIGNALS:
    void loadProgress(int done, int total);
    void loaded(const kevui::SessionHandle& session, const kevui::ModelInfo& info);
    void loadFailed(const QString& path, const QString& message);
    // After loaded(): the model's SHA-256 (kev::model_hash) and its size on disk.
    void hashed(const QString& path, const QString& sha256, qint64 bytes);

private:
    std::shared_ptr<std::atomic<bool>> loadCancel_;
    // Hashes already made, with the size and modification times they were made at: a
    // reload of an unchanged file (another precision) does not read it all again.
    struct KnownHash {
        QString stamp;
        QString sha256;
        qint64 bytes = 0;
    };
    QHash<QString, KnownHash> known_;
};

class EngineWorker : public LaneWorker {
    Q_OBJECT
public:
    EngineWorker();
    ~EngineWorker() override;

public Q_SLOTS:
    // Takes a freshly loaded session; the previous one is released here.
    void adopt(const kevui::SessionHandle& session, const kevui::ModelInfo& info);
    void run(kevui::RunId id, const kev::GenerationRequest& request,
             const kevui::RunHandle& control, const QVector<int>& cardOfRequest);
    // Tokenization and layout only (cheap): what the pack view draws.
    void preview(quint64 id, const kev::GenerationRequest& request, const QVector<int>& cardOfRequest);
    // Attaches the LoRA adapter folder `path` to the model unless it is attached already
    // (a reload drops it). Runs after it use it; a failure is kept for their message.
    void setLora(const QString& path);

Q_SIGNALS:
    void modelLoaded(const kevui::ModelInfo& info);
    void previewReady(quint64 id, const kevui::PackPreview& pack);
    void previewFailed(quint64 id, const QString& message);
    void loraFailed(const QString& path, const QString& message);

private:
    PackPreview makePreview(const kev::PreparedPack& pack, const QVector<int>& cardOfRequest) const;

    SessionHandle session_;
    ModelInfo info_;
    QString loraError_;  // why the last adapter asked for could not be attached
    // Keys and values of earlier runs' prompts: a re-run recomputes only what changed.
    // Emptied when another model is adopted (the cache also empties itself when the
    // adapter changes).
    std::unique_ptr<kev::PrefixCache> prefixCache_;
};

// Owns the worker thread; the window's single entry point to the local engine, and the
// lane the run controller sends local cards to.
class EngineHost : public EngineLane {
    Q_OBJECT
public:
    explicit EngineHost(QObject* parent = nullptr);
    // Cancels whatever runs, then quit() + wait() on the thread.
    ~EngineHost() override;

    void load(const QString& path, const LoadSettings& settings);
    void cancelLoad();
    // Pack view: newer previews replace older ones.
    void preview(const kev::GenerationRequest& request, const QVector<int>& cardOfRequest);
    // The LoRA adapter later runs use (queued before them, so they see it).
    void setLora(const QString& path) { Q_EMIT requestLora(path); }

    bool loading() const { return loading_; }
    bool hasModel() const { return hasModel_; }
    const ModelInfo& model() const { return model_; }
    QString describe() const override { return model_.path; }
    bool givesTokenIds() const override { return true; }
    bool joinsRuns() const override { return true; }

Q_SIGNALS:
    void loadProgress(int done, int total);
    void modelLoaded(const kevui::ModelInfo& info);
    void loadFailed(const QString& path, const QString& message);
    void modelHashed(const QString& sha256);  // model().sha256 is now set
    void previewReady(const kevui::PackPreview& pack);
    void previewFailed(const QString& message);
    void loraFailed(const QString& path, const QString& message);

    // To the worker (queued).
    void requestLoad(const QString& path, const kevui::LoadSettings& settings);
    void requestRun(kevui::RunId id, const kev::GenerationRequest& request,
                    const kevui::RunHandle& control, const QVector<int>& cardOfRequest);
    void requestPreview(quint64 id, const kev::GenerationRequest& request,
                        const QVector<int>& cardOfRequest);
    void requestLora(const QString& path);

protected:
    void start(RunId id, const kev::GenerationRequest& request, const RunHandle& control,
               const QVector<int>& cardOfRequest) override;

private:
    QThread thread_;
    QThread loaderThread_;
    EngineWorker* worker_ = nullptr;
    ModelLoader* loader_ = nullptr;
    std::shared_ptr<std::atomic<bool>> loadCancel_;
    quint64 nextPreview_ = 1;
    quint64 wantedPreview_ = 0;
    bool loading_ = false;
    bool hasModel_ = false;
    ModelInfo model_;
    struct Hash {
        QString sha256;
        qint64 bytes = 0;
    };
    QHash<QString, Hash> hashes_;  // path -> SHA-256 and size of the file as last loaded
};

}  // namespace kevui

Q_DECLARE_METATYPE(kevui::SessionHandle)
