//! The services a [`Stack`] runs in process: ingest, the stages and the analytics rollup.

use std::future::Future;

use docflow_stage::StageService;
use tokio::sync::oneshot;

use super::{Cause, IngestTweak, Service, Stack};
use crate::{EmbeddedError, io, workspace_root};

impl Stack {
    /// Runs `service` in process until the stack stops (its future gets the shutdown signal).
    fn spawn<F, Fut, E>(&mut self, name: &'static str, service: F)
    where
        F: FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<Cause>,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        let fut = service(shutdown);
        let task = tokio::spawn(async move { fut.await.map_err(Into::into) });
        self.services.push(Service {
            name,
            stop: Some(stop),
            task,
        });
    }

    pub(super) async fn start_ingest(
        &mut self,
        port: Option<u16>,
        tweak: IngestTweak,
    ) -> Result<(), EmbeddedError> {
        let tokens: Vec<(&str, &str)> = self
            .tokens
            .iter()
            .map(|(t, n)| (t.as_str(), n.as_str()))
            .collect();
        let mut config = docflow_ingest::Config::local(
            &self.broker.bootstrap_servers(),
            &self.registry.url(),
            &self.database_url,
            &self.objects,
            &tokens,
        )?;
        config.topic = self.topics.uploaded.clone();
        config.processed_topic = self.topics.processed.clone();
        // The search model `make tools` installed in this checkout (not the process's
        // working directory, which for a test is its crate's).
        config.embed_model_dir = workspace_root().join(".tools/models/minilm");
        tweak(&mut config);
        // The console watches the stages' groups under this stack's names, and the rollup's
        // (`start_analytics`) on both topics.
        if config.console_groups.is_empty() {
            config.console_groups = config
                .stages
                .iter()
                .map(|stage| format!("{}={stage}", self.group(stage)))
                .collect();
            config.console_groups.push(
                docflow_replay::health::GroupSpec::analytics_rollup(
                    &self.group(docflow_analytics_rollup::GROUP),
                    &self.topics.uploaded,
                    &self.topics.processed,
                )
                .to_string(),
            );
        }
        let app =
            docflow_ingest::build_state(&config)
                .await
                .map_err(|e| EmbeddedError::Service {
                    name: "ingest",
                    source: e.into(),
                })?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.unwrap_or(0)))
            .await
            .map_err(io("binding the ingest API"))?;
        let addr = listener.local_addr().map_err(io("ingest address"))?;
        self.ingest_url = Some(format!("http://{addr}"));
        self.spawn("ingest", move |shutdown| {
            docflow_ingest::serve(app, listener, shutdown)
        });
        Ok(())
    }

    /// Starts stage `name` of [`crate::STAGES`] in process with its default configuration.
    pub async fn start_named(&mut self, name: &str) -> Result<(), EmbeddedError> {
        crate::stages::stage(name)
            .ok_or_else(|| EmbeddedError::UnknownStage(name.to_owned()))?
            .start(self)
            .await
    }

    /// Starts stage `S` in process (its tools from the workspace's `.tools`, its workers the
    /// workspace's built binary of it) with `tweak` applied to its configuration (workers,
    /// limits, sizes).
    pub async fn start_stage<S: StageService>(
        &mut self,
        tweak: impl FnOnce(&mut S::Config),
    ) -> Result<(), EmbeddedError> {
        let mut config = S::local(
            self.stage_args(S::NAME)?,
            &crate::stages::local_tools::<S>()?,
        )?;
        tweak(&mut config);
        // Started and probed here, so a failure is this call's error, not the task's.
        let registry = prometheus::Registry::new();
        let stage = crate::stages::build::<S>(&config, &registry).await?;
        self.spawn(S::NAME, move |shutdown| async move {
            docflow_stage::run_until(stage, S::stage_args(&config), registry, shutdown).await
        });
        Ok(())
    }

    /// Starts the analytics rollup in process (group `analytics-rollup` of this stack, both
    /// pipeline topics, this stack's database; every other setting at its default).
    pub async fn start_analytics(&mut self) -> Result<(), EmbeddedError> {
        let config = docflow_analytics_rollup::Config::from_args([
            "docflow-analytics-rollup".to_owned(),
            "--kafka-bootstrap-servers".to_owned(),
            self.broker.bootstrap_servers(),
            "--schema-registry-url".to_owned(),
            self.registry.url(),
            "--database-url".to_owned(),
            self.database_url.clone(),
            "--topic".to_owned(),
            self.topics.uploaded.clone(),
            "--processed-topic".to_owned(),
            self.topics.processed.clone(),
            "--group".to_owned(),
            self.group(docflow_analytics_rollup::GROUP),
            "--metrics-listen".to_owned(),
            "127.0.0.1:0".to_owned(),
        ])?;
        self.spawn(docflow_analytics_rollup::GROUP, move |shutdown| {
            docflow_analytics_rollup::run_until(config, shutdown)
        });
        Ok(())
    }
}
