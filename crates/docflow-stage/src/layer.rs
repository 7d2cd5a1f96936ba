//! The handler every stage runs under, and the replica around it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use docflow_events::{DocProcessed, DocUploaded, EventCodec, Outcome, stage_keys, topics};
use docflow_runtime::admin::{TopicSpec, ensure_topics};
use docflow_runtime::handler::class::{DATABASE, EMPTY, PRODUCE};
use docflow_runtime::metrics::now_ms;
use docflow_runtime::producer::{SendError, idempotent_producer, send_event};
use docflow_runtime::{ConsumerSpec, Handler, HandlerError, Record};
use docflow_store::{
    Blobs, Deliveries, ResultStore, StageRun, StageStatus, StoreError, TextKey, TextStore,
};
use rdkafka::producer::FutureProducer;

use crate::{Document, Stage, StageArgs, StageError, StoreLedger, class};

/// [`Stage`] `S` as a consumer-runtime [`Handler`]: the common steps around its work.
pub struct StageHandler<S> {
    stage: S,
    blobs: Blobs,
    results: ResultStore,
    deliveries: Deliveries,
    text: TextStore,
    codec: EventCodec,
    producer: FutureProducer,
    processed_topic: String,
    produce_timeout: Duration,
}

impl<S> std::fmt::Debug for StageHandler<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageHandler")
            .field("blobs", &self.blobs)
            .field("processed_topic", &self.processed_topic)
            .finish_non_exhaustive()
    }
}

fn db(e: StoreError) -> HandlerError {
    // A query the database refuses is still worth retrying: the schema may be migrating.
    HandlerError::transient(DATABASE, e)
}

impl<S: Stage> StageHandler<S> {
    /// Opens what the stage needs from `args`: object store, result store (migrated), registry
    /// client, and the process's one producer.
    pub async fn connect(stage: S, args: &StageArgs) -> Result<Self, StageError> {
        let blobs = Blobs::open(&args.objects.dir)?;
        let pool = docflow_store::open(&args.database.url, args.database.max_connections).await?;
        Ok(StageHandler {
            stage,
            blobs,
            deliveries: Deliveries::new(pool.clone()),
            text: TextStore::new(pool.clone()),
            results: ResultStore::new(pool),
            codec: docflow_runtime::codec(&args.registry)?,
            producer: idempotent_producer(&args.kafka, &client_id::<S>(args))?,
            processed_topic: args.processed_topic.clone(),
            produce_timeout: args.produce_timeout,
        })
    }

    fn run_for(&self, event: &DocUploaded, record: &Record, status: StageStatus) -> StageRun {
        StageRun {
            tenant_id: event.tenant_id.clone(),
            document_id: event.document_id.clone(),
            stage: S::NAME.to_owned(),
            stage_version: S::VERSION,
            status,
            idempotency_key: None,
            result_ref: None,
            output: None,
            error: None,
            attempts: i64::from(record.attempt),
            started_at_ms: now_ms(),
            finished_at_ms: now_ms(),
            event_sent_at_ms: None,
        }
    }

    /// The document's bytes from the object store, checked against the event.
    async fn fetch(&self, event: &DocUploaded, record: &Record) -> Result<Document, HandlerError> {
        let key = self
            .blobs
            .key_of(&event.object_uri)
            .map_err(|e| HandlerError::permanent(class::OBJECT_URI, e))?;
        if !Blobs::is_under(&key, &event.tenant_id) {
            return Err(HandlerError::permanent(
                class::TENANT_MISMATCH,
                format!(
                    "the object {} does not belong to tenant {}",
                    event.object_uri, event.tenant_id
                ),
            ));
        }
        let bytes = self
            .blobs
            .get(&key)
            .await
            .map_err(|e| HandlerError::transient(class::OBJECT_STORE, e))?
            .ok_or_else(|| {
                HandlerError::transient(
                    class::BLOB_MISSING,
                    format!("no blob at {}", event.object_uri),
                )
            })?;
        let (digest, idempotency_key) = stage_keys(&bytes, S::NAME, S::VERSION);
        if digest != event.document_id {
            return Err(HandlerError::permanent(
                class::DIGEST_MISMATCH,
                format!(
                    "the bytes at {} do not hash to the document id",
                    event.object_uri
                ),
            ));
        }
        Ok(Document {
            event: event.clone(),
            bytes,
            idempotency_key,
            attempt: record.attempt,
            progress: Some(crate::Progress::new(
                self.text.clone(),
                event,
                S::NAME,
                S::VERSION,
            )),
        })
    }

    /// Produces `doc.processed` for `run` unless already acknowledged, then marks it.
    async fn announce(&self, run: &StageRun, record: &Record) -> Result<(), HandlerError> {
        if run.event_sent_at_ms.is_some() {
            return Ok(());
        }
        let event = DocProcessed {
            document_id: run.document_id.clone(),
            tenant_id: run.tenant_id.clone(),
            stage: run.stage.clone(),
            stage_version: run.stage_version,
            outcome: match run.status {
                StageStatus::Done => Outcome::Ok,
                StageStatus::Failed => Outcome::Failed,
                StageStatus::DeadLettered => Outcome::DeadLettered,
            },
            result_ref: run.result_ref.clone(),
            duration_ms: run.duration_ms(),
            finished_at: run.finished_at_ms,
        };
        send_event(
            &self.producer,
            &self.codec,
            &self.processed_topic,
            &run.document_id,
            &event,
            &record.trace,
            self.produce_timeout,
        )
        .await
        .map_err(|e| match e {
            SendError::Encode(e) => HandlerError::from(e),
            e @ (SendError::Produce { .. } | SendError::Timeout { .. }) => {
                HandlerError::transient(PRODUCE, e)
            }
        })?;
        self.results
            .mark_event_sent(run, now_ms())
            .await
            .map_err(db)
    }
}

impl<S: Stage> Handler for StageHandler<S> {
    type Input = DocUploaded;

    async fn decode(&self, record: &Record) -> Result<DocUploaded, HandlerError> {
        let payload = record
            .payload
            .as_deref()
            .ok_or_else(|| HandlerError::permanent(EMPTY, "record has no value"))?;
        Ok(self.codec.decode::<DocUploaded>(payload).await?)
    }

    async fn handle(&self, record: &Record, event: &DocUploaded) -> Result<(), HandlerError> {
        let (tenant, doc) = (event.tenant_id.as_str(), event.document_id.as_str());
        if let Some(run) = self
            .results
            .get(tenant, doc, S::NAME, S::VERSION)
            .await
            .map_err(db)?
            && run.status == StageStatus::Done
        {
            tracing::debug!(stage = S::NAME, tenant, document = doc, "already done");
            return self.announce(&run, record).await;
        }
        let started_at_ms = now_ms();
        let document = self.fetch(event, record).await?;
        let output = self.stage.process(&document).await?;
        let mut run = self.run_for(event, record, StageStatus::Done);
        run.started_at_ms = started_at_ms;
        if let Some(artifact) = output.artifact {
            let key = Blobs::key([
                tenant,
                "derived",
                S::NAME,
                &format!("v{}", S::VERSION),
                &format!("{}.{}", document.idempotency_key, artifact.extension),
            ]);
            self.blobs
                .put(&key, artifact.bytes)
                .await
                .map_err(|e| HandlerError::transient(class::OBJECT_STORE, e))?;
            run.result_ref = Some(key.to_string());
        }
        if let Some(text) = &output.text {
            // Before the done row: a crash in between redoes the document and finds these
            // rows already there (they are keyed like the run).
            let key = TextKey {
                tenant_id: tenant,
                document_id: doc,
                stage: S::NAME,
                stage_version: S::VERSION,
            };
            self.text.put(key, text).await.map_err(db)?;
        }
        run.idempotency_key = Some(document.idempotency_key);
        run.output = output.summary.map(|s| s.to_string());
        run.finished_at_ms = now_ms();
        let stored = self.results.record(&run).await.map_err(db)?;
        tracing::info!(
            stage = S::NAME,
            tenant,
            document = doc,
            ms = run.duration_ms(),
            "result recorded"
        );
        self.announce(&stored, record).await
    }

    async fn dead_lettered(
        &self,
        record: &Record,
        event: Option<&DocUploaded>,
        error: &HandlerError,
    ) {
        // An undecodable record names no document: the DLQ headers are all there is.
        let Some(event) = event else {
            return;
        };
        let mut run = self.run_for(event, record, StageStatus::DeadLettered);
        run.started_at_ms = record.timestamp_ms.unwrap_or(run.started_at_ms);
        run.error = Some(error.to_string());
        let stored = match self.results.record(&run).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, document = %event.document_id, "could not record the dead-lettered run");
                return;
            }
        };
        if let Err(e) = self.announce(&stored, record).await {
            tracing::warn!(error = %e, document = %event.document_id, "could not announce the dead-lettered run");
        }
    }
}

fn client_id<S: Stage>(args: &StageArgs) -> String {
    format!("docflow-{}", args.group_of(S::NAME))
}

/// Runs stage `stage` as one replica of its consumer group until `shutdown`, then drains
/// in-flight documents and commits. `metrics` holds the stage's own metrics; the runtime adds
/// its consumer metrics and serves all of them on `--metrics-listen`.
pub async fn run_until<S: Stage>(
    stage: S,
    args: &StageArgs,
    metrics: prometheus::Registry,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), StageError> {
    let handler = Arc::new(StageHandler::connect(stage, args).await?);
    let processed = TopicSpec::new(
        args.processed_topic.clone(),
        topics::partitions(topics::DOC_PROCESSED).unwrap_or(1),
    );
    if let Err(e) = ensure_topics(&args.kafka, &[processed], Duration::from_secs(30)).await {
        tracing::warn!(error = %e, topic = %args.processed_topic, "could not create the results topic; it must exist");
    }
    let mut spec = ConsumerSpec::new(args.group_of(S::NAME), vec![args.topic.clone()]);
    spec.producer = Some(handler.producer.clone());
    spec.ledger = Some(Arc::new(StoreLedger(handler.deliveries.clone())));
    docflow_runtime::run_service(
        &args.kafka,
        &args.consumer,
        spec,
        handler,
        metrics,
        shutdown,
    )
    .await?;
    Ok(())
}
