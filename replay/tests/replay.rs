//! `docflow-replay plan` and `run --mode reset` against the real broker: a topic with
//! records at known times, a group with committed offsets, and other groups left alone.

// Test code: panicking on unexpected errors is the point.
#![allow(clippy::unwrap_used, missing_debug_implementations, unreachable_pub)]

use std::time::Duration;

use docflow_embedded::{Stack, unique_name};
use docflow_replay::{Output, PlanArgs, ReplayError, TargetArgs, plan, reset};
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

    // Back by 5 on every partition: 15 records to process again.
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
