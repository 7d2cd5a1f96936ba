use std::time::Duration;

use rand::{Rng, SeedableRng};
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Headers;

use docflow_runtime::status::ReplicaStatus;

use crate::support::{Bed, ids, metric};

/// kill -9 a replica at random points, 12 times, over 5,000 records: afterwards every record
/// has exactly one row and the committed offsets reach the log end. Redeliveries (the price
/// of at-least-once) are counted and printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_loses_nothing() {
    let bed = Bed::new(6).await;
    let all = ids("m-", 5_000);
    bed.produce(&all).await;
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // 1,000 records/s at most: 5,000 take several lives of the replica.
    let args = ["--workers", "2", "--buffer", "2", "--work-ms", "2"];
    let mut kills = 0;
    for i in 0..12 {
        let before = bed.rows().await;
        let mut r = bed.spawn(&format!("victim-{i}"), &args);
        // Wait until it owns partitions and writes rows, then kill it at a random point of
        // its work (mid-handler, mid-commit, mid-rebalance).
        bed.wait_rows(before + 1, Duration::from_secs(60)).await;
        let wait_ms = rng.random_range(0..600);
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        r.kill9();
        kills += 1;
        println!(
            "kill {kills} after {wait_ms} ms: rows {before} -> {}",
            bed.rows().await
        );
    }
    let mut last = bed.spawn("survivor", &args);
    bed.wait_rows(5_000, Duration::from_secs(240)).await;
    assert!(last.terminate(), "survivor exits 0 on SIGTERM");

    let rows = bed.row_ids().await;
    assert_eq!(rows.len(), all.len(), "one row per record");
    assert_eq!(rows, all, "every produced record has its row");
    let redelivered = bed.redeliveries().await;
    println!(
        "{kills} kill -9s, 5000 records, {redelivered} redeliveries (each cost compute, never a row)"
    );
    assert_eq!(
        bed.committed(),
        bed.log_end(),
        "committed offsets reach the log end"
    );
    bed.finish().await;
}

/// SIGTERM drains and commits: a restart redelivers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_shutdown_and_restart_redeliver_nothing() {
    let bed = Bed::new(4).await;
    let all = ids("c-", 1_500);
    bed.produce(&all).await;
    let args = ["--workers", "4", "--buffer", "4", "--work-ms", "4"];
    let mut first = bed.spawn("first", &args);
    first.wait_ready().await.unwrap();
    bed.wait_rows(300, Duration::from_secs(60)).await;
    assert!(first.terminate(), "exit 0 after SIGTERM");
    let at_stop = bed.rows().await;
    assert!(at_stop < 1_500, "stopped mid-stream ({at_stop} rows)");
    let mut second = bed.spawn("second", &args);
    bed.wait_rows(1_500, Duration::from_secs(120)).await;
    assert!(second.terminate());
    assert_eq!(bed.row_ids().await, all);
    assert_eq!(
        bed.redeliveries().await,
        0,
        "a clean stop redelivers nothing"
    );
    assert_eq!(bed.committed(), bed.log_end());
    bed.finish().await;
}

/// 1 → 3 → 1 replicas while records flow (a KEDA scale-out, then a scale-in by SIGTERM):
/// nothing lost, nothing dead-lettered. Redeliveries are printed (0 in
/// recent runs: revocations store and commit what is done); not asserted, because a
/// revocation that hits `--revoke-timeout` legitimately redelivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_and_in_loses_nothing() {
    let bed = Bed::new(6).await;
    let all = ids("s-", 3_000);
    bed.produce(&all).await;
    let args = ["--workers", "2", "--buffer", "2", "--work-ms", "6"];
    let mut a = bed.spawn("a", &args);
    a.wait_ready().await.unwrap();
    bed.wait_rows(200, Duration::from_secs(60)).await;
    let mut b = bed.spawn("b", &args);
    let mut c = bed.spawn("c", &args);
    // Until both newcomers own partitions — a cooperative rebalance takes two rounds, each
    // waiting for every member's next heartbeat (a fixed 4 s was sometimes too short) —
    // then a little work each.
    for r in [&b, &c] {
        r.wait_ready().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let m = r.metrics().await.unwrap();
            if metric(&m, "docflow_consumer_assigned_partitions", &[]) > 0.0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "a scaled-out replica got no partitions\n{m}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mid = bed.rows().await;
    // All three worked: rows were written by three processes.
    assert!(b.terminate(), "b exits 0");
    assert!(c.terminate(), "c exits 0");
    println!("rows at scale-in: {mid}");
    bed.wait_rows(3_000, Duration::from_secs(180)).await;
    let pids: i64 = sqlx::query_scalar("SELECT COUNT(DISTINCT pid) FROM testbed_rows")
        .fetch_one(&bed.pool)
        .await
        .unwrap();
    assert!(a.terminate());
    assert_eq!(bed.row_ids().await, all);
    println!(
        "replicas that wrote rows: {pids}; redeliveries: {}",
        bed.redeliveries().await
    );
    assert!(pids >= 2, "scaled-out replicas took partitions");
    assert_eq!(
        bed.dead_letters().await,
        Vec::new(),
        "a scale-in dead-letters nothing"
    );
    assert_eq!(bed.committed(), bed.log_end());
    bed.finish().await;
}

/// Handlers that run longer than max.poll.interval.ms cause no rebalance and no redelivery:
/// the poll loop keeps polling with the partitions paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_longer_than_max_poll_interval_causes_no_rebalance() {
    let bed = Bed::new(2).await;
    let all = ids("l-", 6);
    bed.produce(&all).await;
    let mut r = bed.spawn(
        "slow",
        &[
            "--workers",
            "1",
            "--buffer",
            "0",
            "--work-ms",
            "8000",
            "--max-poll-interval",
            "6s",
        ],
    );
    r.wait_ready().await.unwrap();
    bed.wait_rows(3, Duration::from_secs(60)).await;
    let m = r.metrics().await.unwrap();
    // What only the replica knows, in its status reports (what ingest's console shows):
    // both partitions assigned and paused, at capacity with its one record in flight.
    let reports = || async {
        bed.stack
            .records(docflow_config::STATUS_TOPIC)
            .await
            .unwrap()
            .into_iter()
            .map(|(_, v)| serde_json::from_slice::<ReplicaStatus>(&v).unwrap())
            .filter(|s| s.group == bed.group)
            .collect::<Vec<_>>()
    };
    let paused = reports()
        .await
        .into_iter()
        .find(|s| s.paused)
        .unwrap_or_else(|| panic!("no paused report\n{m}"));
    assert_eq!(paused.assigned.len(), 2, "{paused:?}");
    assert_eq!((paused.in_flight, paused.capacity), (1, 1), "{paused:?}");
    assert!(!paused.stopped);
    assert!(r.terminate());
    // Its last report says it left.
    let last = reports().await.into_iter().max_by_key(|s| s.at_ms).unwrap();
    assert!(last.stopped && last.assigned.is_empty(), "{last:?}");
    assert!(!last.is_current(last.at_ms));
    assert_eq!(
        metric(
            &m,
            "docflow_consumer_rebalances_total",
            &["kind=\"revoke\""]
        ),
        0.0,
        "no revocation\n{m}"
    );
    assert_eq!(
        metric(&m, "docflow_consumer_rebalances_total", &["kind=\"lost\""]),
        0.0,
        "no lost assignment\n{m}"
    );
    assert_eq!(
        metric(
            &m,
            "docflow_consumer_rebalances_total",
            &["kind=\"assign\""]
        ),
        1.0,
        "{m}"
    );
    assert_eq!(bed.redeliveries().await, 0);
    bed.finish().await;
}

/// Poison records land in the DLQ exactly once with provenance headers; flaky records
/// succeed after retries; everything else flows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_records_are_dead_lettered_once_with_headers() {
    let bed = Bed::new(3).await;
    let mut all = Vec::new();
    let mut poison = Vec::new();
    for i in 0..600 {
        let id = match i % 10 {
            3 => {
                let p = format!("poison-{i:04}");
                poison.push(p.clone());
                p
            }
            5 => format!("flaky-{i:04}"),
            _ => format!("ok-{i:04}"),
        };
        all.push(id);
    }
    bed.produce(&all).await;
    let mut r = bed.spawn(
        "dlq",
        &[
            "--workers",
            "4",
            "--work-ms",
            "1",
            "--max-attempts",
            "4",
            "--flaky-failures",
            "2",
        ],
    );
    let good = (all.len() - poison.len()) as i64;
    bed.wait_rows(good, Duration::from_secs(120)).await;

    let dlq = docflow_runtime::dlq::topic_for(&bed.topic, &bed.group);
    let consumer: StreamConsumer = bed
        .kafka()
        .client_config("dlq-reader")
        .set("group.id", docflow_stack::unique_name("dlq-reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&dlq]).unwrap();
    let mut seen = Vec::new();
    while seen.len() < poison.len() {
        let m = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
            .await
            .expect("dead letters arrive")
            .unwrap();
        let h = m.headers().unwrap();
        let get = |name: &str| {
            h.iter()
                .find(|x| x.key == name)
                .and_then(|x| x.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        use docflow_runtime::dlq::headers as dh;
        assert_eq!(get(dh::TOPIC), bed.topic);
        assert_eq!(get(dh::GROUP), bed.group);
        assert_eq!(get(dh::ERROR_CLASS), "poison");
        assert_eq!(get(dh::ATTEMPTS), "1", "permanent errors are not retried");
        assert!(get(dh::ERROR_MESSAGE).contains("is poison"));
        assert!(get(dh::PARTITION).parse::<i32>().is_ok());
        assert!(get(dh::OFFSET).parse::<i64>().is_ok());
        assert!(get(dh::TIMESTAMP).parse::<i64>().is_ok());
        assert!(get("traceparent").starts_with("00-"));
        let value = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
        assert_eq!(m.key(), Some(value.as_bytes()), "key and value unchanged");
        seen.push(value);
    }
    // Nothing more arrives: each poison record exactly once.
    let extra = tokio::time::timeout(Duration::from_secs(3), consumer.recv()).await;
    assert!(extra.is_err(), "no duplicate dead letters");
    drop(consumer);
    let m = r.metrics().await.unwrap();
    assert!(r.terminate());
    seen.sort();
    assert_eq!(seen, poison);
    let g = format!("group=\"{}\"", bed.group);
    assert_eq!(
        metric(
            &m,
            "docflow_consumer_messages_total",
            &[&g, "outcome=\"dead_lettered\""]
        ),
        poison.len() as f64
    );
    assert_eq!(
        metric(
            &m,
            "docflow_consumer_messages_total",
            &[&g, "outcome=\"retried\""]
        ),
        120.0,
        "60 flaky records x 2 transient failures"
    );
    assert_eq!(bed.rows().await, good);
    assert_eq!(
        bed.committed(),
        bed.log_end(),
        "the partitions moved past the poison"
    );
    bed.finish().await;
}

/// SIGTERM is not a crash: a long record in hand when the grace period runs out is
/// interrupted, its delivery claim released, and the process exits 0. Five such graceful
/// restarts (rolling deploys, scale-ins) in a row with `--max-crash-deliveries 3` do not
/// dead-letter it; the sixth life finishes it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_record_is_not_counted_as_a_crash() {
    let bed = Bed::new(1).await;
    let mut all = ids("ok-", 5);
    all.insert(0, "long-0000".to_owned());
    bed.produce(&all).await;
    let args = [
        "--workers",
        "1",
        "--max-crash-deliveries",
        "3",
        "--shutdown-grace",
        "500ms",
        "--long-ms",
        "4000",
    ];
    for life in 0..5 {
        let mut r = bed.spawn(&format!("term-{life}"), &args);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while bed.claims().await == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the long record was never claimed\n{}",
                bed.logs_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(r.terminate(), "exit 0 after SIGTERM\n{}", bed.logs_tail());
        assert_eq!(
            bed.claims().await,
            0,
            "life {life}: the interrupted delivery released its claim"
        );
        assert!(
            !bed.row_ids().await.contains(&"long-0000".to_owned()),
            "life {life}: the long record did not finish"
        );
    }
    let mut last = bed.spawn("term-last", &args);
    bed.wait_rows(6, Duration::from_secs(60)).await;
    assert!(last.terminate());
    assert_eq!(
        bed.dead_letters().await,
        Vec::new(),
        "nothing dead-lettered"
    );
    assert_eq!(bed.row_ids().await.len(), 6);
    assert_eq!(bed.committed(), bed.log_end());
    bed.finish().await;
}

/// A record that takes its whole process down (here an abort; in production a native
/// library the OOM killer ends) among seven long ones in flight. The first death makes all
/// eight suspects; each then runs alone, so the seven finish and only the killer dies
/// again, alone, seen by the supervisor (SIGABRT), which starts the replica again each
/// time. After `--max-crash-deliveries` such deaths the next delivery dead-letters it as
/// `crash_loop` without running it, naming the deaths; nothing else is dead-lettered and
/// the replica stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_kills_its_process_running_alone_is_the_only_one_convicted() {
    let bed = Bed::new(1).await;
    let mut all = ids("ok-", 12);
    for i in 0..7 {
        all.insert(i, format!("long-{i:04}"));
    }
    all.insert(3, "crash-0003".to_owned());
    bed.produce(&all).await;
    let args = [
        "--workers",
        "8",
        "--work-ms",
        "1",
        "--long-ms",
        "1000",
        "--max-crash-deliveries",
        "3",
    ];
    let mut r = bed.spawn("crash", &args);
    bed.wait_rows(19, Duration::from_secs(150)).await;
    // The killer's last deaths come after the others are done (restarts 1, 2, 4, 8 s apart).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(150);
    while bed.dead_letters().await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never dead-lettered\n{}",
            bed.logs_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        !r.exited(),
        "the supervisor started the replica again after each death\n{}",
        bed.logs_tail()
    );
    let dead = bed.dead_letters().await;
    assert_eq!(
        dead,
        vec![(
            "crash-0003".to_owned(),
            docflow_runtime::ledger::CRASH_LOOP.to_owned()
        )],
        "only the killer is dead-lettered, once, as a crash loop"
    );
    let message = bed.dead_letter_messages().await.concat();
    assert!(
        message.contains("death 3 alone") && message.contains("SIGABRT"),
        "the dead letter names the deaths alone and how the process ended: {message}"
    );
    println!("{message}");
    assert!(
        message.contains("died 3 times while this record ran alone, 3 of them of its own fault"),
        "three deaths alone convicted it: {message}"
    );
    let rows = bed.row_ids().await;
    assert!(!rows.contains(&"crash-0003".to_owned()));
    assert_eq!(
        rows.len(),
        19,
        "the seven long records and the rest finished"
    );

    r.wait_ready().await.unwrap();
    assert!(r.terminate(), "exit 0 on SIGTERM through the supervisor");
    assert_eq!(bed.committed(), bed.log_end(), "the partition moved on");
    bed.finish().await;
}

/// kill -9 of the stage (its supervisor; the replica ends itself) ×10 at random moments,
/// each once the new life holds records, with long records in flight: deaths nobody saw
/// make suspects, never convictions: nothing dead-lettered, every record done once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_long_records_in_flight_convicts_no_one() {
    let bed = Bed::new(4).await;
    let mut all = ids("ok-", 70);
    all.extend((0..30).map(|i| format!("long-{i:04}")));
    bed.produce(&all).await;
    let seed: u64 = rand::random();
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let args = [
        "--workers",
        "8",
        "--work-ms",
        "20",
        "--long-ms",
        "700",
        "--max-crash-deliveries",
        "3",
    ];
    let mut in_hand_at_kills = 0;
    for i in 0..10 {
        let spawned = docflow_runtime::metrics::now_ms();
        let rows = bed.rows().await;
        let mut r = bed.spawn(&format!("victim-{i}"), &args);
        // Until this life holds records (or writes rows): kill it mid-work.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while bed.claims_since(spawned).await == 0 && bed.rows().await == rows {
            assert!(
                tokio::time::Instant::now() < deadline,
                "nothing claimed\n{}",
                bed.logs_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let wait_ms = rng.random_range(0..1500);
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        r.kill9();
        // The replica ends itself once its supervisor is gone.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let left = bed.claims().await;
        in_hand_at_kills += left;
        println!(
            "kill {} after {wait_ms} ms: {} rows, {left} claims left in hand",
            i + 1,
            bed.rows().await,
        );
    }
    let mut last = bed.spawn("survivor", &args);
    bed.wait_rows(100, Duration::from_secs(240)).await;
    assert!(last.terminate(), "survivor exits 0 on SIGTERM");
    assert!(in_hand_at_kills > 0, "the kills left records in hand");
    assert_eq!(
        bed.dead_letters().await,
        Vec::new(),
        "no one convicted by deaths from outside"
    );
    let rows = bed.row_ids().await;
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(rows, expected, "every record done, once");
    assert_eq!(bed.committed(), bed.log_end());
    bed.finish().await;
}
