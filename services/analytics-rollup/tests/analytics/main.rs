//! The analytics rollup as real processes over the real broker, registry and database
//! (SQLite; PostgreSQL too when DATABASE_URL is set): kill -9 at random points, rescaling,
//! offset resets, replays under another group and poison records leave the counts equal to a
//! recount of the topic read back with a plain consumer.

// Test code: panicking on unexpected errors is the point.
#![allow(clippy::unwrap_used, missing_debug_implementations, unreachable_pub)]

mod pipeline;
mod support;

use std::time::Duration;

use docflow_events::Outcome;
use rand::Rng;
use support::{Bed, Db, metric, uploads};

/// kill -9 of the only replica at 10 random points while 5,000 uploads flow in; each kill
/// lands after the replica has counted something since it started, so it interrupts real
/// work. Afterwards every (tenant, hour, content type) equals the recount.
async fn kill_9_at_random_points(db: Db) {
    let bed = Bed::new(db, 3).await;
    let events = uploads(5_000, 0);
    let producer = bed.produce_paced(events.clone(), 50, Duration::from_millis(500));
    let mut rng = rand::rng();
    for round in 0..10 {
        let mut r = bed.spawn(&format!("r{round}"), &[]);
        let before = bed.counted_documents().await;
        // Until it counted something of its own (or everything is counted).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while bed.counted_documents().await == before
            && before < 5_000
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..400))).await;
        r.kill9();
    }
    producer.await.unwrap();
    let _last = bed.spawn("last", &[]);
    bed.wait_documents(5_000, Duration::from_secs(120)).await;
    // Let any late duplicate land before comparing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    bed.assert_counts_equal_recount().await;
    bed.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_loses_and_doubles_nothing_sqlite() {
    kill_9_at_random_points(Db::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_loses_and_doubles_nothing_postgres() {
    if std::env::var("DATABASE_URL").is_err() {
        eprintln!("DATABASE_URL is not set: the PostgreSQL run is skipped (CI sets it)");
        return;
    }
    kill_9_at_random_points(Db::FromEnv).await;
}

/// 1 → 3 → 1 replicas while 3,000 uploads flow over 6 partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescale_1_3_1_keeps_the_counts_exact() {
    let bed = Bed::new(Db::FromEnv, 6).await;
    let events = uploads(3_000, 1);
    let producer = bed.produce_paced(events, 100, Duration::from_millis(300));
    let _a = bed.spawn("a", &[]);
    bed.wait_documents(800, Duration::from_secs(60)).await;
    let mut b = bed.spawn("b", &[]);
    let mut c = bed.spawn("c", &[]);
    bed.wait_documents(1_800, Duration::from_secs(60)).await;
    assert!(b.terminate(), "b exits 0 on SIGTERM");
    assert!(c.terminate(), "c exits 0 on SIGTERM");
    producer.await.unwrap();
    bed.wait_documents(3_000, Duration::from_secs(90)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    bed.assert_counts_equal_recount().await;
    bed.finish().await;
}

/// A poison record is dead-lettered and counted apart; a stage result announced twice
/// counts once; resetting the group's Kafka offsets to the beginning changes nothing (the
/// replica starts where the database says); a replay of everything under another group
/// finds every record counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_reset_and_replay_never_double_count() {
    let bed = Bed::new(Db::FromEnv, 2).await;
    let events = uploads(300, 2);
    bed.produce(&events).await;
    bed.produce_raw(b"not an avro record").await;
    // 20 stage results, each announced twice (a stage's outbox is at least once).
    let results: Vec<_> = events[..20]
        .iter()
        .map(|e| bed.processed(e, "thumbnails", Outcome::Ok))
        .collect();
    bed.produce_processed(&results).await;
    bed.produce_processed(&results).await;

    let mut r = bed.spawn("live", &[]);
    bed.wait_documents(300, Duration::from_secs(60)).await;
    bed.wait_dead_lettered(1, Duration::from_secs(30)).await;
    bed.wait_outcomes(20, Duration::from_secs(30)).await;
    let dlq = bed.dead_letters().await;
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    assert_eq!(dlq[0].0, "not an avro record");
    assert!(!dlq[0].1.is_empty(), "the dead letter says its error class");
    let m = r.metrics().await.unwrap();
    assert_eq!(
        metric(
            &m,
            "docflow_analytics_records_total",
            &["input=\"processed\"", "result=\"duplicate\""]
        ),
        20.0,
        "each second announcement was seen and not counted"
    );
    assert!(r.terminate());
    bed.assert_counts_equal_recount().await;
    assert_eq!(bed.outcomes().await, 20);

    // Kafka's offsets of the group back to the beginning (what `docflow replay run --mode
    // reset --to-earliest --execute` does); the database's positions win.
    bed.reset_kafka_offsets_to_beginning();
    let r = bed.spawn("live-again", &[]);
    let more = uploads(50, 3);
    bed.produce(&more).await;
    bed.wait_documents(350, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let m = r.metrics().await.unwrap();
    assert_eq!(
        metric(
            &m,
            "docflow_analytics_records_total",
            &["result=\"duplicate\""]
        ),
        0.0,
        "nothing below the database's positions was even read again"
    );
    bed.assert_counts_equal_recount().await;

    // Everything again, under a replay group that reads from the beginning.
    let replay_group = format!("{}.replay.1", bed.group);
    // No --live-group: a `.replay.<id>` group counts against its live group by itself.
    let side = bed.spawn("replay", &["--group", &replay_group]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let m = side.metrics().await.unwrap();
        let seen = metric(&m, "docflow_analytics_records_total", &[]);
        // 350 uploads + 40 announcements + the poison (dead-lettered again, counted once).
        if seen >= 391.0 {
            assert_eq!(
                metric(
                    &m,
                    "docflow_analytics_records_total",
                    &["result=\"counted\""]
                ),
                0.0,
                "the replay found every record counted: {m}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replay saw {seen} of 391 records\n{}",
            bed.logs_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bed.assert_counts_equal_recount().await;
    assert_eq!(bed.outcomes().await, 20);
    assert_eq!(bed.dead_lettered().await, 1);
    drop(r);
    drop(side);
    bed.finish().await;
}

/// A database whose position is past the topic's log end (the topic recreated, a database
/// from elsewhere) is refused: the replica stops with the reason instead of passing the
/// records below that position as counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_past_the_log_end_is_refused() {
    let bed = Bed::new(Db::Sqlite, 1).await;
    bed.produce(&uploads(5, 4)).await;
    sqlx::query(
        "INSERT INTO analytics_positions (consumer_group, topic, part, next_offset) VALUES ($1, $2, 0, 1000)",
    )
    .bind(&bed.group)
    .bind(bed.uploaded_topic())
    .execute(&bed.pool)
    .await
    .unwrap();
    let mut r = bed.spawn("refused", &[]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !r.exited() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still running\n{}",
            bed.logs_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = bed.log("refused");
    assert!(
        log.contains("the stored position 1000") && log.contains("past the log end 5"),
        "{log}"
    );
    assert_eq!(bed.counted_documents().await, 0);
    bed.finish().await;
}
