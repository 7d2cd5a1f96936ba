//! `docflow-replay plan` and `run --mode reset` against the real broker: a topic with
//! records at known times, a group with committed offsets, and other groups left alone.

// Test code: panicking on unexpected errors is the point.
#![allow(clippy::unwrap_used, missing_debug_implementations, unreachable_pub)]

use std::time::Duration;

use docflow_replay::{Output, PlanArgs, ReplayError, TargetArgs, plan, reset};
use docflow_stack::{Stack, unique_name};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

/// Records per partition; record `i` of every partition has time `T0 + 1000 * i`.
const N: i64 = 20;
const T0: i64 = 1_780_000_000_000;

fn target() -> TargetArgs {
    TargetArgs {
        from_offset: None,
        from_timestamp: None,
        by_duration: None,
        shift_by: None,
        to_earliest: false,
        to_latest: false,
        from_file: None,
    }
}

fn args(stack: &Stack, group: &str, topic: &str, target: TargetArgs) -> PlanArgs {
    PlanArgs {
        group: group.to_owned(),
        topic: topic.to_owned(),
        target,
        partition: Vec::new(),
        to_offset: None,
        rate: None,
        metrics_url: Vec::new(),
        sample: Duration::from_secs(10),
        output: Output::Table,
        kafka: stack.kafka(),
    }
}

fn committed_of(stack: &Stack, group: &str, topic: &str) -> Vec<i64> {
    let c: BaseConsumer = stack
        .kafka()
        .client_config("check")
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    (0..3)
        .map(|p| match got.find_partition(topic, p).unwrap().offset() {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect()
}

fn commit(stack: &Stack, group: &str, topic: &str, offsets: &[i64]) {
    let c: BaseConsumer = stack
        .kafka()
        .client_config("setup")
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets.iter().enumerate() {
        tpl.add_partition_offset(topic, i32::try_from(p).unwrap(), Offset::Offset(*o))
            .unwrap();
    }
    c.commit(&tpl, CommitMode::Sync).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_and_reset_one_group_without_touching_another() {
    let stack = Stack::builder().start().await.unwrap();
    let topic = stack.topic("replay", 3).await.unwrap();
    let producer: FutureProducer = stack.kafka().client_config("p").create().unwrap();
    for p in 0..3 {
        for i in 0..N {
            producer
                .send(
                    FutureRecord::to(&topic)
                        .partition(p)
                        .key("k")
                        .payload("v")
                        .timestamp(T0 + 1000 * i),
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
        }
    }
    let (group, other) = (unique_name("g"), unique_name("other"));
    commit(&stack, &group, &topic, &[20, 15, 20]);
    commit(&stack, &other, &topic, &[20, 20, 20]);

    // Back by 5 on every partition (partition 1 had 5 left to do): 20 records to process.
    let mut t = target();
    t.shift_by = Some(-5);
    let p = plan(args(&stack, &group, &topic, t)).await.unwrap();
    let targets: Vec<i64> = p.partitions.iter().map(|x| x.target).collect();
    assert_eq!(targets, vec![15, 10, 15]);
    assert_eq!(p.total(), 5 + 10 + 5);
    assert_eq!(
        p.csv(),
        format!("{topic},0,15\n{topic},1,10\n{topic},2,15\n")
    );

    // The CSV plan read back (`--from-file`) gives the same targets.
    let file = std::env::temp_dir().join(format!("{}.csv", unique_name("plan")));
    std::fs::write(&file, p.csv()).unwrap();
    let mut t = target();
    t.from_file = Some(file.clone());
    let again = plan(args(&stack, &group, &topic, t)).await.unwrap();
    assert_eq!(again.csv(), p.csv());
    // Only the partitions a file lists are in the plan (and would be reset); a file with
    // no line for the topic is refused.
    std::fs::write(&file, format!("{topic},1,3\nother-topic,0,1\n")).unwrap();
    let mut t = target();
    t.from_file = Some(file.clone());
    let one = plan(args(&stack, &group, &topic, t)).await.unwrap();
    assert_eq!(one.csv(), format!("{topic},1,3\n"));
    std::fs::write(&file, "other-topic,0,1\n").unwrap();
    let mut t = target();
    t.from_file = Some(file.clone());
    let err = plan(args(&stack, &group, &topic, t)).await.unwrap_err();
    assert!(matches!(err, ReplayError::PlanFile { .. }), "{err}");
    std::fs::remove_file(&file).unwrap();

    // A time: record 12 is the first at or after T0 + 11,500 on every partition.
    let mut t = target();
    t.from_timestamp = Some(T0 + 11_500);
    let p = plan(args(&stack, &group, &topic, t)).await.unwrap();
    assert!(p.partitions.iter().all(|x| x.target == 12), "{p:?}");
    // After every record: the end; before every record: the start.
    let mut t = target();
    t.from_timestamp = Some(T0 + 99_000);
    let p = plan(args(&stack, &group, &topic, t)).await.unwrap();
    assert!(p.partitions.iter().all(|x| x.target == N), "{p:?}");
    let mut t = target();
    t.from_timestamp = Some(T0 - 1);
    let p = plan(args(&stack, &group, &topic, t)).await.unwrap();
    assert!(p.partitions.iter().all(|x| x.target == 0), "{p:?}");

    // Out of the log: clamped and reported; only the partitions asked for.
    let mut t = target();
    t.from_offset = Some(-7);
    let mut a = args(&stack, &group, &topic, t);
    a.partition = vec![1];
    let p = plan(a).await.unwrap();
    assert_eq!(p.partitions.len(), 1);
    assert_eq!(
        (p.partitions[0].target, p.partitions[0].clamped_from),
        (0, Some(-7))
    );
    assert!(p.table(Some(10.0)).contains("clamped"));

    // A partition or topic that is not there: a clear error, not an empty plan.
    let mut t = target();
    t.to_earliest = true;
    let mut a = args(&stack, &group, &topic, t.clone());
    a.partition = vec![7];
    let err = plan(a).await.unwrap_err();
    assert!(
        matches!(err, ReplayError::NoSuchPartition { partition: 7, .. }),
        "{err}"
    );
    let err = plan(args(&stack, &group, "no-such-topic", t))
        .await
        .unwrap_err();
    assert!(matches!(err, ReplayError::NoSuchTopic(_)), "{err}");

    // Nothing committed: --shift-by has nothing to shift.
    let mut t = target();
    t.shift_by = Some(-1);
    let err = plan(args(&stack, &unique_name("fresh"), &topic, t))
        .await
        .unwrap_err();
    assert!(matches!(err, ReplayError::NothingToShift(0)), "{err}");

    // The plan changed nothing; the reset moves this group only.
    assert_eq!(committed_of(&stack, &group, &topic), vec![20, 15, 20]);
    let mut t = target();
    t.to_earliest = true;
    let p = plan(args(&stack, &group, &topic, t)).await.unwrap();
    reset(stack.kafka(), &p).await.unwrap();
    assert_eq!(committed_of(&stack, &group, &topic), vec![0, 0, 0]);
    assert_eq!(committed_of(&stack, &other, &topic), vec![20, 20, 20]);

    // While the group has a member, a reset is refused and says how to stop it.
    let member: BaseConsumer = stack
        .kafka()
        .client_config("member")
        .set("group.id", &group)
        .create()
        .unwrap();
    member.subscribe(&[&topic]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while member.assignment().unwrap().count() == 0 {
        assert!(std::time::Instant::now() < deadline, "member never joined");
        let _ = member.poll(Duration::from_millis(100));
    }
    let err = reset(stack.kafka(), &p).await.unwrap_err();
    assert!(matches!(err, ReplayError::ActiveMembers { .. }), "{err}");
    assert!(err.to_string().contains("paused-replicas"), "{err}");
    drop(member);
    stack.stop().await.unwrap();
}

/// Fails records whose value starts with `bad` until it is fixed; counts what it handled.
#[derive(Default)]
struct Flaky {
    fixed: std::sync::atomic::AtomicBool,
    handled: std::sync::Mutex<Vec<String>>,
}

impl docflow_runtime::Handler for Flaky {
    type Input = String;

    async fn decode(
        &self,
        record: &docflow_runtime::Record,
    ) -> Result<String, docflow_runtime::HandlerError> {
        Ok(String::from_utf8_lossy(record.payload.as_deref().unwrap_or_default()).into_owned())
    }

    async fn handle(
        &self,
        _record: &docflow_runtime::Record,
        value: &String,
    ) -> Result<(), docflow_runtime::HandlerError> {
        if value.starts_with("bad") && !self.fixed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(docflow_runtime::HandlerError::permanent(
                "bug",
                "not fixed yet",
            ));
        }
        self.handled.lock().unwrap().push(value.clone());
        Ok(())
    }
}

/// A consumer group running `handler` in this process until the returned sender fires.
fn run_group(
    stack: &Stack,
    group: &str,
    topic: &str,
    handler: std::sync::Arc<Flaky>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let kafka = stack.kafka();
    let spec = docflow_runtime::ConsumerSpec {
        group_id: group.to_owned(),
        topics: vec![topic.to_owned()],
        client_id: group.to_owned(),
        producer: None,
        ledger: None,
        positions: None,
    };
    let task = tokio::spawn(async move {
        let metrics = docflow_runtime::ConsumerMetrics::new(&prometheus::Registry::new()).unwrap();
        docflow_runtime::run(
            &kafka,
            &docflow_config::ConsumerArgs::default(),
            spec,
            handler,
            metrics,
            std::sync::Arc::new(docflow_runtime::Health::default()),
            async {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
    });
    (stop, task)
}

/// Waits until `group`'s committed offsets on `topic` add up to `n`; panics with `what`
/// after `timeout`.
async fn wait_committed(
    stack: &Stack,
    group: &str,
    topic: &str,
    n: i64,
    timeout: Duration,
    what: &str,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    while stack.committed(group, topic).await.unwrap() < n {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The newest stage runs of each of `ids` (tenant `acme`).
async fn latest_runs(
    store: &docflow_store::ResultStore,
    ids: &[String],
) -> Vec<Vec<docflow_store::StageRun>> {
    let mut runs = Vec::new();
    for id in ids {
        runs.push(store.latest_runs("acme", id).await.unwrap());
    }
    runs
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Dead letters go back to their topic for their group only, once each; one redriven as
/// often as allowed and failing again stays in the DLQ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_redriven_for_their_group_once() {
    use docflow_replay::{DlqArgs, redrive};
    use std::sync::Arc;

    let stack = Stack::builder().start().await.unwrap();
    let topic = stack.topic("redrive", 2).await.unwrap();
    let producer: FutureProducer = stack.kafka().client_config("p").create().unwrap();
    for (i, v) in ["ok-1", "bad-1", "ok-2", "bad-2", "ok-3"]
        .iter()
        .enumerate()
    {
        producer
            .send(
                FutureRecord::to(&topic).key(&format!("k{i}")).payload(*v),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
    let (a, b) = (unique_name("flaky"), unique_name("bystander"));
    let (flaky, bystander) = (Arc::new(Flaky::default()), Arc::new(Flaky::default()));
    // The bystander has no bug: it handles every original record once.
    bystander
        .fixed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (stop_a, task_a) = run_group(&stack, &a, &topic, flaky.clone());
    let (stop_b, task_b) = run_group(&stack, &b, &topic, bystander.clone());
    let dlq = docflow_events::topics::dead_letter(&topic, &a);
    let dead = |n: usize| {
        let (stack, dlq) = (&stack, dlq.clone());
        async move {
            stack
                .wait_records(&dlq, n, Duration::from_secs(60))
                .await
                .unwrap()
        }
    };
    dead(2).await;
    eventually("the bystander handled all five", || {
        bystander.handled.lock().unwrap().len() == 5
    })
    .await;

    let args = |execute: bool, max_redrives: u32| DlqArgs {
        group: a.clone(),
        topic: topic.clone(),
        error_class: None,
        from: None,
        to: None,
        max_redrives,
        execute,
        kafka: stack.kafka(),
        database: docflow_config::DatabaseArgs {
            url: stack.database_url.clone(),
            max_connections: 2,
        },
    };
    // Dry run: says two, sends nothing.
    let r = redrive(&args(false, 1)).await.unwrap();
    assert_eq!((r.read, r.redriven), (2, 2));
    assert_eq!(r.by_class.get("bug"), Some(&2));
    assert_eq!(stack.records(&topic).await.unwrap().len(), 5);
    // A filter that matches nothing.
    let mut only_timeouts = args(false, 1);
    only_timeouts.error_class = Some("timeout".into());
    assert_eq!(redrive(&only_timeouts).await.unwrap().filtered, 2);

    // Not fixed yet: redriven, fails again, dead-lettered again (with its redrive count).
    let r = redrive(&args(true, 1)).await.unwrap();
    assert_eq!(r.redriven, 2);
    dead(4).await;
    let counts: Vec<Option<String>> = stack
        .records_with_header(&dlq, docflow_runtime::dlq::headers::REDRIVE_COUNT)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, count)| count)
        .collect();
    let mut counts = counts;
    counts.sort();
    assert_eq!(
        counts,
        vec![None, None, Some("1".to_owned()), Some("1".to_owned())],
        "dead-lettered again with their redrive count"
    );
    // Out of redrives (1): the new dead letters stay; the first two were redriven already.
    let r = redrive(&args(true, 1)).await.unwrap();
    assert_eq!((r.redriven, r.already_redriven, r.exhausted), (0, 2, 2));

    // Fixed, with redrives to spare: the two are handled by their group.
    flaky.fixed.store(true, std::sync::atomic::Ordering::SeqCst);
    let r = redrive(&args(true, 3)).await.unwrap();
    assert_eq!((r.redriven, r.already_redriven), (2, 2));
    eventually("the fixed group handled the redriven records", || {
        let handled = flaky.handled.lock().unwrap();
        handled.iter().filter(|v| v.starts_with("bad")).count() == 2
    })
    .await;
    // The other group saw four redriven records go by (it committed past all nine) and
    // handled none of them.
    wait_committed(
        &stack,
        &b,
        &topic,
        9,
        Duration::from_secs(60),
        "bystander never passed them",
    )
    .await;
    assert_eq!(bystander.handled.lock().unwrap().len(), 5);
    assert_eq!(stack.records(&topic).await.unwrap().len(), 9);
    assert_eq!(
        stack.records(&dlq).await.unwrap().len(),
        4,
        "nothing new failed"
    );

    let _ = (stop_a.send(()), stop_b.send(()));
    task_a.await.unwrap();
    task_b.await.unwrap();
    stack.stop().await.unwrap();
}

/// The real thumbnails stage: a reset of its idle group is refused while it runs, then
/// reprocesses exactly the chosen range when it comes back; with the stage version
/// unchanged that costs compute only — no result row rewritten, no second announcement,
/// and the other work of the stage untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resetting_a_stage_reprocesses_the_range_and_rewrites_nothing() {
    use docflow_events::stages::THUMBNAILS;

    let mut stack = Stack::builder()
        .partitions(1)
        .token("tok", "acme")
        .ingest()
        .stage("thumbnails")
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let ids = upload_samples(&http, &stack, "?wait=30s").await;
    let (group, uploaded, processed) = (
        stack.group(THUMBNAILS),
        stack.topics.uploaded.clone(),
        stack.topics.processed.clone(),
    );
    wait_committed(
        &stack,
        &group,
        &uploaded,
        3,
        Duration::from_secs(60),
        "the group did not get there",
    )
    .await;
    let store =
        docflow_store::ResultStore::new(docflow_store::open(&stack.database_url, 2).await.unwrap());
    let before = latest_runs(&store, &ids).await;
    assert_eq!(stack.records(&processed).await.unwrap().len(), 3);

    // Back two records. Refused while the stage is a member of its group.
    let mut t = target();
    t.shift_by = Some(-2);
    let p = plan(args(&stack, &group, &uploaded, t)).await.unwrap();
    assert_eq!((p.partitions[0].target, p.total()), (1, 2));
    let err = reset(stack.kafka(), &p).await.unwrap_err();
    assert!(matches!(err, ReplayError::ActiveMembers { .. }), "{err}");

    // Stopped (it leaves the group when it drains), the reset goes through.
    assert!(stack.signal_shutdown(THUMBNAILS));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match reset(stack.kafka(), &p).await {
            Ok(()) => break,
            Err(ReplayError::ActiveMembers { .. }) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the stage never left"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(stack.committed(&group, &uploaded).await.unwrap(), 1);

    // Back: it works through offsets 1 and 2 again and commits the end.
    stack.start_named("thumbnails").await.unwrap();
    wait_committed(
        &stack,
        &group,
        &uploaded,
        3,
        Duration::from_secs(60),
        "the range was not reprocessed",
    )
    .await;
    // Same version: the same rows (not rewritten) and no second announcement.
    for (id, runs) in ids.iter().zip(&before) {
        assert_eq!(&store.latest_runs("acme", id).await.unwrap(), runs, "{id}");
    }
    assert_eq!(stack.records(&processed).await.unwrap().len(), 3);
    stack.stop().await.unwrap();
}

/// The sample documents' directory.
const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../samples");

/// Uploads three sample PDFs as tenant `acme` (token `tok`) with `query`; their job ids.
async fn upload_samples(http: &reqwest::Client, stack: &Stack, query: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for name in ["invoice-acme.pdf", "report-q3.pdf", "letter-renewal.pdf"] {
        let bytes = std::fs::read(format!("{SAMPLES}/{name}")).unwrap();
        let r = http
            .post(format!("{}/v1/documents{query}", stack.ingest_url()))
            .bearer_auth("tok")
            .body(bytes)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{name}: {}", r.status());
        if query.contains("wait") {
            assert_eq!(r.status(), 200, "{name}: every stage done within the wait");
        }
        let job: serde_json::Value = r.json().await.unwrap();
        ids.push(job["job_id"].as_str().unwrap().to_owned());
    }
    ids
}

/// Takes 20 ms a record.
struct Slow;

impl docflow_runtime::Handler for Slow {
    type Input = ();

    async fn decode(
        &self,
        _: &docflow_runtime::Record,
    ) -> Result<(), docflow_runtime::HandlerError> {
        Ok(())
    }

    async fn handle(
        &self,
        _: &docflow_runtime::Record,
        (): &(),
    ) -> Result<(), docflow_runtime::HandlerError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
}

/// The drain estimate from a running replica's `/metrics`: two workers at 20 ms a record
/// finish at most 100 records/s, and this one is busy throughout the sample.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_is_measured_from_a_replicas_metrics() {
    let stack = Stack::builder().start().await.unwrap();
    let topic = stack.topic("rate", 2).await.unwrap();
    let producer: FutureProducer = stack.kafka().client_config("p").create().unwrap();
    for i in 0..600 {
        producer
            .send(
                FutureRecord::to(&topic).key(&format!("k{i}")).payload("v"),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
    let group = unique_name("rated");
    let port = docflow_stack::free_port().unwrap();
    let consumer_args = docflow_config::ConsumerArgs {
        workers: 2,
        metrics_listen: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        ..docflow_config::ConsumerArgs::default()
    };
    let spec = docflow_runtime::ConsumerSpec {
        group_id: group.clone(),
        topics: vec![topic.clone()],
        client_id: "rated".into(),
        producer: None,
        ledger: None,
        positions: None,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let kafka = stack.kafka();
    let task = tokio::spawn(async move {
        docflow_runtime::run_service(
            &kafka,
            &consumer_args,
            spec,
            std::sync::Arc::new(Slow),
            prometheus::Registry::new(),
            async {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
    });
    // Busy before the sample starts.
    wait_committed(
        &stack,
        &group,
        &topic,
        20,
        Duration::from_secs(60),
        "the group did not get there",
    )
    .await;
    let url = format!("http://127.0.0.1:{port}/metrics");
    let rate = docflow_replay::rate::measure(&[url], &group, Duration::from_secs(2))
        .await
        .unwrap();
    assert!((10.0..=110.0).contains(&rate), "{rate} records/s");
    let _ = stop.send(());
    task.await.unwrap();
    stack.stop().await.unwrap();
}

/// `run --mode side`: the real thumbnails binary replays the whole topic as a temporary
/// group beside the live stage, which keeps its offsets and its membership; throttled and
/// interrupted part-way, the same replay id resumes from where it stopped; the same stage
/// version rewrites nothing and announces nothing twice; run once more, nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_side_replay_reprocesses_the_range_beside_the_live_group_and_resumes() {
    use docflow_events::stages::THUMBNAILS;
    use docflow_replay::side;

    let stack = Stack::builder()
        .partitions(2)
        .token("tok", "acme")
        .ingest()
        .stage("thumbnails")
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let ids = upload_samples(&http, &stack, "?wait=30s").await;
    let (group, uploaded, processed) = (
        stack.group(THUMBNAILS),
        stack.topics.uploaded.clone(),
        stack.topics.processed.clone(),
    );
    wait_committed(
        &stack,
        &group,
        &uploaded,
        3,
        Duration::from_secs(60),
        "the group did not get there",
    )
    .await;
    let store =
        docflow_store::ResultStore::new(docflow_store::open(&stack.database_url, 2).await.unwrap());
    let before = latest_runs(&store, &ids).await;

    let mut t = target();
    t.to_earliest = true;
    let p = plan(args(&stack, &group, &uploaded, t)).await.unwrap();
    assert_eq!(p.total(), 3);
    let state = std::env::temp_dir().join(unique_name("side-state"));
    let thumbnails = docflow_stack::workspace_binary("docflow-thumbnails").unwrap();
    let command: Vec<String> = [
        thumbnails.display().to_string(),
        "--kafka-bootstrap-servers".into(),
        stack.broker.bootstrap_servers(),
        "--schema-registry-url".into(),
        stack.registry.url(),
        "--database-url".into(),
        stack.database_url.clone(),
        "--object-dir".into(),
        stack.objects.display().to_string(),
        "--topic".into(),
        uploaded.clone(),
        "--processed-topic".into(),
        processed.clone(),
        "--pdfium-lib".into(),
        docflow_stack::pdfium_library().display().to_string(),
        "--log-format".into(),
        "json".into(),
    ]
    .into();
    std::fs::create_dir_all(&state).unwrap();
    let mut run = docflow_replay::SideRun {
        id: "t1".into(),
        state_dir: state.clone(),
        max_rate: 0.2,
        command,
        progress_bar: false,
        log: Some(state.join("first.log")),
    };
    let (ranges, resumed) = side::ranges_for(&p, &run, true).unwrap();
    assert!(!resumed);
    let side_group = side::side_group(&group, "t1");

    // Interrupted: throttled to a record every 5 s, stopped (the replica killed) once its
    // first record is committed. (The first commit of a new group can take seconds on a
    // loaded machine: at a record every 2.5 s it sometimes already held all three.)
    let interrupted = {
        let (kafka, p, run, ranges) = (stack.kafka(), p.clone(), run.clone(), ranges.clone());
        tokio::spawn(async move { side::run_side(&kafka, &p, &run, &ranges).await })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let done_before = loop {
        let done: i64 = committed_of_partitions(&stack, &side_group, &uploaded, 2)
            .into_iter()
            .map(|c| c.max(0))
            .sum();
        if done >= 1 {
            break done;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the side replay never progressed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Meanwhile the live group keeps consuming new uploads.
    let fresh = std::fs::read(format!("{SAMPLES}/scan-delivery-note.png")).unwrap();
    let r = http
        .post(format!("{}/v1/documents?wait=30s", stack.ingest_url()))
        .bearer_auth("tok")
        .body(fresh)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the live stage answered during the replay");
    interrupted.abort();
    let _ = interrupted.await;
    assert!(done_before < 3, "stopped part-way ({done_before} of 3)");
    wait_committed(
        &stack,
        &group,
        &uploaded,
        4,
        Duration::from_secs(30),
        "the live group stalled",
    )
    .await;

    // Resumed with the same id: its kept ranges, from where it stopped, unthrottled.
    run.max_rate = 0.0;
    run.log = Some(state.join("resumed.log"));
    let (kept, resumed) = side::ranges_for(&p, &run, true).unwrap();
    assert!(resumed);
    assert_eq!(kept, ranges);
    let summary = side::run_side(&stack.kafka(), &p, &run, &ranges)
        .await
        .unwrap();
    assert_eq!(summary.group, side_group);
    // The resumed replica started where the first one's commits said, not at the range start.
    let log = std::fs::read_to_string(state.join("resumed.log")).unwrap();
    let resumed_at: Vec<i64> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "replaying a range" && v["fields"]["resumed"] == true)
        .filter_map(|v| v["fields"]["start"].as_i64())
        .collect();
    assert!(resumed_at.iter().any(|s| *s > 0), "{log}");
    // The range was fixed at the start: the new upload is the live group's alone.
    assert_eq!(
        (summary.records, summary.ok, summary.dead_lettered),
        (3, 3, 0),
        "{summary}"
    );
    // The side group committed the range ends; the live group is where it was, still a member.
    let side_committed = committed_of_partitions(&stack, &side_group, &uploaded, 2);
    for (r, c) in ranges.iter().zip(side_committed) {
        if r.end > r.start {
            assert_eq!(c, r.end, "partition {}", r.partition);
        }
    }
    assert_eq!(stack.committed(&group, &uploaded).await.unwrap(), 4);
    let mut t = target();
    t.to_earliest = true;
    let again = plan(args(&stack, &group, &uploaded, t.clone()))
        .await
        .unwrap();
    assert!(
        matches!(
            reset(stack.kafka(), &again).await,
            Err(ReplayError::ActiveMembers { .. })
        ),
        "the live stage is still a member of its group"
    );
    // Same version: nothing rewritten, nothing announced twice.
    for (id, runs) in ids.iter().zip(&before) {
        assert_eq!(&store.latest_runs("acme", id).await.unwrap(), runs, "{id}");
    }
    assert_eq!(stack.records(&processed).await.unwrap().len(), 4);

    // The same id again: its first run's ranges, all done already.
    let (kept, resumed) = side::ranges_for(&again, &run, true).unwrap();
    assert!(resumed);
    assert_eq!(kept, ranges);
    let summary = side::run_side(&stack.kafka(), &again, &run, &kept)
        .await
        .unwrap();
    assert_eq!(summary.records, 3, "{summary}");
    assert_eq!(stack.records(&processed).await.unwrap().len(), 4);
    let _ = std::fs::remove_dir_all(state);
    stack.stop().await.unwrap();
}

fn committed_of_partitions(stack: &Stack, group: &str, topic: &str, n: i32) -> Vec<i64> {
    let c: BaseConsumer = stack
        .kafka()
        .client_config("check")
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..n {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    (0..n)
        .map(|p| match got.find_partition(topic, p).unwrap().offset() {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect()
}

/// A stage whose version is a type parameter: "fixing" it is running `Sizer<2>`.
struct Sizer<const V: i32>;

impl<const V: i32> docflow_stage::Stage for Sizer<V> {
    const NAME: &'static str = "sizer";
    const VERSION: i32 = V;

    async fn process(
        &self,
        doc: &docflow_stage::Document,
    ) -> Result<docflow_stage::Output, docflow_runtime::HandlerError> {
        Ok(docflow_stage::Output::default()
            .summary(serde_json::json!({ "bytes": doc.bytes.len(), "logic": V })))
    }
}

/// Runs `stage` in process on the stack until `committed` records of its group are done.
async fn run_stage_until<S: docflow_stage::Stage>(stack: &Stack, stage: S, committed: i64) {
    let args = stack.stage_args("sizer").unwrap();
    let (group, topic) = (stack.group("sizer"), stack.topics.uploaded.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        docflow_stage::run_until(stage, &args, prometheus::Registry::new(), async {
            let _ = stopped.await;
        })
        .await
    });
    wait_committed(
        stack,
        &group,
        &topic,
        committed,
        Duration::from_secs(60),
        "the stage stalled",
    )
    .await;
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// After a fix shipped as a new stage version, a reset replays exactly the chosen range:
/// the new version's rows and announcements for those documents only, and the job shows
/// the new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_with_a_bumped_stage_version_writes_the_new_version_for_the_range() {
    let stack = Stack::builder()
        .partitions(1)
        .token("tok", "acme")
        .ingest_with(|c| c.stages = vec!["sizer".to_owned()])
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let ids = upload_samples(&http, &stack, "").await;
    let (group, uploaded, processed) = (
        stack.group("sizer"),
        stack.topics.uploaded.clone(),
        stack.topics.processed.clone(),
    );
    run_stage_until(&stack, Sizer::<1>, 3).await;
    assert_eq!(stack.records(&processed).await.unwrap().len(), 3);

    // The fix: version 2, replayed from offset 1 (the second and third documents).
    let mut t = target();
    t.from_offset = Some(1);
    let p = plan(args(&stack, &group, &uploaded, t)).await.unwrap();
    assert_eq!(p.total(), 2);
    reset(stack.kafka(), &p).await.unwrap();
    run_stage_until(&stack, Sizer::<2>, 3).await;

    assert_eq!(
        stack.records(&processed).await.unwrap().len(),
        5,
        "one new announcement per replayed document"
    );
    let version_of = |id: String| {
        let (http, base) = (http.clone(), stack.ingest_url().to_owned());
        async move {
            let job: serde_json::Value = http
                .get(format!("{base}/v1/jobs/{id}"))
                .bearer_auth("tok")
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let stage = &job["stages"][0];
            assert_eq!(stage["stage"], "sizer", "{job}");
            assert_eq!(stage["status"], "done", "{job}");
            (
                stage["stage_version"].as_i64().unwrap(),
                stage["output"]["logic"].as_i64().unwrap(),
            )
        }
    };
    assert_eq!(
        version_of(ids[0].clone()).await,
        (1, 1),
        "outside the range: untouched"
    );
    assert_eq!(version_of(ids[1].clone()).await, (2, 2));
    assert_eq!(version_of(ids[2].clone()).await, (2, 2));
    stack.stop().await.unwrap();
}
