//! The evaluator's cases: Burrow's own (`core/internal/evaluator/caching_test.go` at
//! ced55ba, `TestCachingEvaluator_CheckRules` and the storage-fixture tests) as table rows,
//! then cases Burrow's tests lack (WARN, one commit), worked out from its rules.

use super::*;

/// One row of `TestCachingEvaluator_CheckRules`: the window (offset, ms, lag), the inputs,
/// and what each rule and the verdict must say.
struct Vector {
    samples: &'static [(i64, i64, Option<u64>)],
    broker: &'static [i64],
    current_lag: u64,
    now_s: i64,
    allowed_lag: u64,
    lag_always_not_zero: bool,
    rewind: Option<usize>,
    stopped: bool,
    stalled: bool,
    lag_not_decreasing: bool,
    recent_lag_zero: bool,
    status: Status,
}

const BURROW: &[Vector] = &[
    // 0: returns OK because there is zero lag somewhere
    Vector {
        samples: &[
            (1000, 100000, Some(0)),
            (2000, 200000, Some(50)),
            (3000, 300000, Some(100)),
            (4000, 400000, Some(150)),
            (5000, 500000, Some(200)),
        ],
        broker: &[5200],
        current_lag: 200,
        now_s: 600,
        allowed_lag: 0,
        lag_always_not_zero: false,
        rewind: None,
        stopped: false,
        stalled: false,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Ok,
    },
    // 1: same status. does not return true for stop because time since last commit (400s) is equal to the difference (500-100), not greater than
    Vector {
        samples: &[
            (1000, 100000, Some(0)),
            (2000, 200000, Some(50)),
            (3000, 300000, Some(100)),
            (4000, 400000, Some(150)),
            (5000, 500000, Some(200)),
        ],
        broker: &[5200],
        current_lag: 200,
        now_s: 900,
        allowed_lag: 0,
        lag_always_not_zero: false,
        rewind: None,
        stopped: false,
        stalled: false,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Ok,
    },
    // 2: status is now STOP because the time since last commit is great enough (500s), even though lag is zero at the start (fixed due to #290)
    Vector {
        samples: &[
            (1000, 100000, Some(0)),
            (2000, 200000, Some(50)),
            (3000, 300000, Some(100)),
            (4000, 400000, Some(150)),
            (5000, 500000, Some(200)),
        ],
        broker: &[5200],
        current_lag: 200,
        now_s: 1000,
        allowed_lag: 0,
        lag_always_not_zero: false,
        rewind: None,
        stopped: true,
        stalled: false,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Stop,
    },
    // 3: status is STOP when lag is always non-zero as well
    Vector {
        samples: &[
            (1000, 100000, Some(50)),
            (2000, 200000, Some(100)),
            (3000, 300000, Some(150)),
            (4000, 400000, Some(200)),
            (5000, 500000, Some(250)),
        ],
        broker: &[5250],
        current_lag: 250,
        now_s: 1000,
        allowed_lag: 0,
        lag_always_not_zero: true,
        rewind: None,
        stopped: true,
        stalled: false,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Stop,
    },
    // 4: status is OK because of zero lag, but stall is true because the offset is always the same and there is lag (another commit with turn this to stall)
    Vector {
        samples: &[
            (1000, 100000, Some(0)),
            (1000, 200000, Some(50)),
            (1000, 300000, Some(100)),
            (1000, 400000, Some(150)),
            (1000, 500000, Some(200)),
        ],
        broker: &[1200],
        current_lag: 200,
        now_s: 600,
        allowed_lag: 0,
        lag_always_not_zero: false,
        rewind: None,
        stopped: false,
        stalled: true,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Ok,
    },
    // 5: status is now STALL because the lag is always non-zero
    Vector {
        samples: &[
            (1000, 100000, Some(100)),
            (1000, 200000, Some(150)),
            (1000, 300000, Some(200)),
            (1000, 400000, Some(250)),
            (1000, 500000, Some(300)),
        ],
        broker: &[1300],
        current_lag: 300,
        now_s: 600,
        allowed_lag: 0,
        lag_always_not_zero: true,
        rewind: None,
        stopped: false,
        stalled: true,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Stall,
    },
    // 6: status is still STALL even when the lag stays the same
    Vector {
        samples: &[
            (1000, 100000, Some(100)),
            (1000, 200000, Some(100)),
            (1000, 300000, Some(100)),
            (1000, 400000, Some(100)),
            (1000, 500000, Some(100)),
        ],
        broker: &[1100],
        current_lag: 100,
        now_s: 600,
        allowed_lag: 0,
        lag_always_not_zero: true,
        rewind: None,
        stopped: false,
        stalled: true,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Stall,
    },
    // 7: status is OK because the offsets go backwards, but though the lag does decrease within the window (caught up the rewind)
    Vector {
        samples: &[
            (1000, 100000, Some(100)),
            (2000, 200000, Some(150)),
            (3000, 300000, Some(200)),
            (2000, 400000, Some(1250)),
            (4000, 500000, Some(300)),
        ],
        broker: &[4300],
        current_lag: 300,
        now_s: 600,
        allowed_lag: 0,
        lag_always_not_zero: true,
        rewind: Some(3),
        stopped: false,
        stalled: false,
        lag_not_decreasing: false,
        recent_lag_zero: false,
        status: Status::Ok,
    },
    // 8: status is OK because the current lag is 0 (even though the offsets show lag), even though it would be considered stopped due to timestamps
    Vector {
        samples: &[
            (1000, 100000, Some(50)),
            (2000, 200000, Some(100)),
            (3000, 300000, Some(150)),
            (4000, 400000, Some(200)),
            (5000, 500000, Some(250)),
        ],
        broker: &[5250],
        current_lag: 0,
        now_s: 1000,
        allowed_lag: 0,
        lag_always_not_zero: true,
        rewind: None,
        stopped: true,
        stalled: false,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Ok,
    },
    // 9: status is STOP due to timestamps because the current lag is non-zero, even though lag is always zero in offsets, only because there is new data (#290)
    Vector {
        samples: &[
            (792748079, 1512224618356, Some(0)),
            (792748080, 1512224619362, Some(0)),
            (792748081, 1512224620366, Some(0)),
            (792748082, 1512224621367, Some(0)),
            (792748083, 1512224622370, Some(0)),
            (792748084, 1512224623373, Some(0)),
            (792748085, 1512224624378, Some(0)),
            (792748086, 1512224625379, Some(0)),
            (792748087, 1512224626383, Some(0)),
            (792748088, 1512224627383, Some(0)),
            (792748089, 1512224628383, Some(0)),
            (792748090, 1512224629388, Some(0)),
            (792748091, 1512224630391, Some(0)),
            (792748092, 1512224631394, Some(0)),
            (792748093, 1512224632397, Some(0)),
        ],
        broker: &[792749024, 792749000, 792748800, 792748600, 792748500],
        current_lag: 931,
        now_s: 1512224650,
        allowed_lag: 0,
        lag_always_not_zero: false,
        rewind: None,
        stopped: true,
        stalled: false,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Stop,
    },
    // 10: status is OK, even though it would be stop due to timestamps, as within the recent broker offset window the lag was zero (#303)
    Vector {
        samples: &[
            (792748079, 1512224618356, Some(0)),
            (792748080, 1512224619362, Some(0)),
            (792748081, 1512224620366, Some(0)),
            (792748082, 1512224621367, Some(0)),
            (792748083, 1512224622370, Some(0)),
            (792748084, 1512224623373, Some(0)),
            (792748085, 1512224624378, Some(0)),
            (792748086, 1512224625379, Some(0)),
            (792748087, 1512224626383, Some(0)),
            (792748088, 1512224627383, Some(0)),
            (792748089, 1512224628383, Some(0)),
            (792748090, 1512224629388, Some(0)),
            (792748091, 1512224630391, Some(0)),
            (792748092, 1512224631394, Some(0)),
            (792748093, 1512224632397, Some(0)),
        ],
        broker: &[792748094, 792748093, 792748093, 792748093],
        current_lag: 1,
        now_s: 1512224650,
        allowed_lag: 0,
        lag_always_not_zero: false,
        rewind: None,
        stopped: true,
        stalled: false,
        lag_not_decreasing: true,
        recent_lag_zero: true,
        status: Status::Ok,
    },
    // 11: same case as test 0 with additional `nil` lag entries which should not affect results
    Vector {
        samples: &[
            (1000, 100000, Some(0)),
            (1500, 150000, None),
            (2000, 200000, Some(50)),
            (2500, 250000, None),
            (3000, 300000, Some(100)),
            (3500, 350000, None),
            (4000, 400000, Some(150)),
            (4500, 450000, None),
            (5000, 500000, Some(200)),
            (5500, 550000, None),
        ],
        broker: &[5700],
        current_lag: 200,
        now_s: 600,
        allowed_lag: 0,
        lag_always_not_zero: false,
        rewind: None,
        stopped: false,
        stalled: false,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Ok,
    },
    // 12: status is OK despite the fact that the current lag is greater zero and the time since last commit is great enough because of the configured allowed lag
    Vector {
        samples: &[
            (1000, 100000, Some(2)),
            (2000, 200000, Some(1)),
            (2000, 300000, Some(1)),
        ],
        broker: &[2001],
        current_lag: 1,
        now_s: 550,
        allowed_lag: 1,
        lag_always_not_zero: false,
        rewind: None,
        stopped: true,
        stalled: false,
        lag_not_decreasing: false,
        recent_lag_zero: false,
        status: Status::Ok,
    },
    // 13: same as 5 but with an allowed lag
    Vector {
        samples: &[
            (1000, 100000, Some(100)),
            (1000, 200000, Some(150)),
            (1000, 300000, Some(200)),
            (1000, 400000, Some(250)),
            (1000, 500000, Some(300)),
        ],
        broker: &[1300],
        current_lag: 300,
        now_s: 600,
        allowed_lag: 99,
        lag_always_not_zero: true,
        rewind: None,
        stopped: false,
        stalled: true,
        lag_not_decreasing: true,
        recent_lag_zero: false,
        status: Status::Stall,
    },
    // 14: same as 7 but with an allowed lag
    Vector {
        samples: &[
            (1000, 100000, Some(100)),
            (2000, 200000, Some(150)),
            (3000, 300000, Some(200)),
            (2000, 400000, Some(1250)),
            (4000, 500000, Some(300)),
        ],
        broker: &[4300],
        current_lag: 300,
        now_s: 600,
        allowed_lag: 99,
        lag_always_not_zero: true,
        rewind: Some(3),
        stopped: false,
        stalled: false,
        lag_not_decreasing: false,
        recent_lag_zero: false,
        status: Status::Ok,
    },
    // 15: Rewind, but we did not catch up to the previous point
    Vector {
        samples: &[
            (1000, 100000, Some(100)),
            (2000, 200000, Some(150)),
            (3000, 300000, Some(200)),
            (2000, 400000, Some(1250)),
            (2500, 500000, Some(300)),
        ],
        broker: &[4300],
        current_lag: 300,
        now_s: 600,
        allowed_lag: 0,
        lag_always_not_zero: true,
        rewind: Some(3),
        stopped: false,
        stalled: false,
        lag_not_decreasing: false,
        recent_lag_zero: false,
        status: Status::Rewind,
    },
];

fn window(samples: &[(i64, i64, Option<u64>)]) -> Vec<Sample> {
    samples
        .iter()
        .map(|&(offset, at_ms, lag)| Sample { offset, at_ms, lag })
        .collect()
}

#[test]
fn burrows_rule_vectors_give_burrows_answers() {
    assert_eq!(BURROW.len(), 16);
    for (i, v) in BURROW.iter().enumerate() {
        let w = window(v.samples);
        let now_ms = v.now_s * 1000;
        assert_eq!(
            lag_always_not_zero(&w, v.allowed_lag),
            v.lag_always_not_zero,
            "vector {i}: lag always not zero"
        );
        assert_eq!(rewind(&w), v.rewind, "vector {i}: rewind");
        assert_eq!(stopped(&w, now_ms), v.stopped, "vector {i}: stopped");
        assert_eq!(stalled(&w), v.stalled, "vector {i}: stalled");
        assert_eq!(
            lag_not_decreasing(&w),
            v.lag_not_decreasing,
            "vector {i}: lag not decreasing"
        );
        assert_eq!(
            recent_lag_zero(&w, v.broker),
            v.recent_lag_zero,
            "vector {i}: recent lag zero"
        );
        let (status, reason) = status_of(&w, v.broker, v.current_lag, now_ms, v.allowed_lag);
        assert_eq!(status, v.status, "vector {i}: {reason}");
        assert!(!reason.is_empty());
    }
}

/// Burrow's storage fixture (`CoordinatorWithOffsets`): one broker offset, 4321; `testgroup`
/// committed 1000, 1100, .. 1900 ten seconds apart (a full window of 10), `testgroup2`
/// 1000 .. 1400 (half a window); evaluated 100 s after the first commit.
fn fixture(commits: i64) -> GroupVerdict {
    let start = 1_000_000;
    let samples: Vec<Sample> = (0..commits)
        .map(|i| Sample {
            offset: 1000 + 100 * i,
            at_ms: start + 10_000 * i,
            lag: Some((4321 - (1000 + 100 * i)) as u64),
        })
        .collect();
    let last = samples.last().map_or(0, |s| s.offset);
    let p = partition(
        0,
        &samples,
        10,
        &[4321],
        (4321 - last) as u64,
        start + 100_000,
        Rules::default(),
    );
    group("testgroup", vec![p])
}

#[test]
fn burrows_single_request_a_full_window_falling_is_ok() {
    let g = fixture(10);
    assert_eq!(g.status, Status::Ok, "{}", g.reason);
    assert_eq!(g.complete, 1.0);
    assert_eq!(g.total_lag, 2421);
    assert_eq!(g.partitions.len(), 1);
}

#[test]
fn burrows_single_request_incomplete_is_a_stopped_error() {
    let g = fixture(5);
    assert_eq!(g.status, Status::Err, "{}", g.reason);
    assert_eq!(g.complete, 0.0);
    assert_eq!(g.total_lag, 2921);
    let p = &g.partitions[0];
    assert_eq!(p.status, Status::Stop);
    assert_eq!(p.complete, 0.5);
    assert_eq!(g.max_lag_partition, Some(0));
    assert_eq!(p.start.map(|s| s.offset), Some(1000));
    assert_eq!(p.end.map(|s| s.offset), Some(1400));
    assert!(
        g.reason
            .starts_with("partition 0 STOP: no commit for 60 s, longer than the window's 40 s"),
        "{}",
        g.reason
    );
}

#[test]
fn an_unknown_group_is_notfound_and_a_group_without_partitions_is_ok_but_incomplete() {
    let tracker = Tracker::new(10);
    let g = tracker.verdict("nosuchgroup", 0, Rules::default());
    assert_eq!(g.status, Status::NotFound);
    assert_eq!(g.complete, 1.0);
    // Burrow's TestCachingEvaluator_TopicDeleted: a known group whose topic is gone.
    let g = group("testgroup", Vec::new());
    assert_eq!((g.status, g.complete), (Status::Ok, 0.0));
}

/// Cases Burrow's tests lack, from its rules: (samples, broker, current lag, now s, status).
#[test]
fn cases_burrows_tests_lack() {
    type Case = (
        &'static [(i64, i64, Option<u64>)],
        &'static [i64],
        u64,
        i64,
        Status,
    );
    let cases: &[Case] = &[
        // The lag never falls while the offset moves: WARN.
        (
            &[
                (1000, 100_000, Some(100)),
                (2000, 200_000, Some(200)),
                (3000, 300_000, Some(300)),
            ],
            &[3300],
            300,
            350,
            Status::Warn,
        ),
        // One commit, a second old: stopped.
        (&[(1000, 100_000, Some(50))], &[1050], 50, 101, Status::Stop),
        // One commit in the same second: one commit is a stalled offset.
        (
            &[(1000, 100_000, Some(50))],
            &[1050],
            50,
            100,
            Status::Stall,
        ),
        // Unknown lags: never zero, never falling.
        (
            &[
                (1000, 100_000, None),
                (2000, 200_000, None),
                (3000, 300_000, None),
            ],
            &[3300],
            300,
            350,
            Status::Warn,
        ),
        // An equal lag is not falling.
        (
            &[
                (1000, 100_000, Some(100)),
                (2000, 200_000, Some(100)),
                (3000, 300_000, Some(100)),
            ],
            &[3100],
            100,
            350,
            Status::Warn,
        ),
        // A rewind that caught up, then falling lag.
        (
            &[
                (3000, 100_000, Some(100)),
                (2000, 200_000, Some(1100)),
                (3000, 300_000, Some(100)),
                (3000, 400_000, Some(100)),
            ],
            &[3100],
            100,
            450,
            Status::Ok,
        ),
    ];
    for (i, &(samples, broker, lag, now_s, want)) in cases.iter().enumerate() {
        let (status, reason) = status_of(&window(samples), broker, lag, now_s * 1000, 0);
        assert_eq!(status, want, "case {i}: {reason}");
    }
}

#[test]
fn a_group_is_its_worst_partition_with_stop_stall_and_rewind_as_err() {
    let p = |partition, status, complete, current_lag| PartitionVerdict {
        topic: "t".to_owned(),
        partition,
        status,
        reason: format!("{status}"),
        complete,
        start: None,
        end: None,
        current_lag,
    };
    let g = group(
        "g",
        vec![p(0, Status::Ok, 1.0, 5), p(1, Status::Warn, 1.0, 9)],
    );
    assert_eq!(g.status, Status::Warn);
    assert_eq!(g.reason, "partition 1 WARN: WARN");
    assert_eq!((g.total_lag, g.max_lag_partition), (14, Some(1)));
    let g = group(
        "g",
        vec![p(0, Status::Warn, 1.0, 0), p(1, Status::Stall, 0.5, 0)],
    );
    assert_eq!((g.status, g.complete), (Status::Err, 0.5));
    assert_eq!(g.max_lag_partition, Some(0), "the first of equal lags");
    let g = group(
        "g",
        vec![p(0, Status::Stop, 1.0, 3), p(1, Status::Warn, 1.0, 3)],
    );
    assert_eq!(g.status, Status::Err, "a later WARN does not lower an ERR");
    assert_eq!(g.reason, "partition 0 STOP: STOP");
    let g = group("g", vec![p(0, Status::Ok, 1.0, 0)]);
    assert_eq!(g.reason, "every partition OK, no lag");
}

#[test]
fn under_the_minimum_complete_a_window_is_ok_unjudged() {
    let w = window(&[(1000, 100_000, Some(50))]);
    let rules = Rules {
        minimum_complete: 0.5,
        ..Rules::default()
    };
    let p = partition(0, &w, 10, &[1050], 50, 101_000, rules);
    assert_eq!((p.status, p.complete), (Status::Ok, 0.1));
    assert!(p.reason.contains("10 % full"), "{}", p.reason);
    let p = partition(0, &[], 10, &[1050], 0, 101_000, Rules::default());
    assert_eq!((p.status, p.complete), (Status::Ok, 0.0));
}

fn obs(partition: i32, committed: Option<i64>, log_end: i64) -> Observation {
    obs_on("t", partition, committed, log_end)
}

fn obs_on(topic: &str, partition: i32, committed: Option<i64>, log_end: i64) -> Observation {
    Observation {
        topic: topic.to_owned(),
        partition,
        committed,
        log_start: 0,
        log_end,
    }
}

/// Sampling: a live group's unmoving offset is STALL; a group without members stops
/// adding commits and is STOP once its last commit is older than the window; a reset back
/// is REWIND; caught up is OK again.
#[test]
fn sampled_windows_tell_stall_stop_rewind_and_recovery() {
    let rules = Rules::default();
    let mut t = Tracker::new(5);
    assert_eq!(t.intervals(), 5);
    // Nothing committed, nobody there: still unknown.
    t.observe("g", 0, false, &[obs(0, None, 10)]);
    assert_eq!(t.verdict("g", 0, rules).status, Status::NotFound);
    // Consuming: offsets move, lag falls to 0.
    for (i, (committed, end)) in [(0, 100), (40, 110), (80, 120), (120, 120), (120, 120)]
        .into_iter()
        .enumerate()
    {
        t.observe("g", i as i64 * 1000, true, &[obs(0, Some(committed), end)]);
    }
    let v = t.verdict("g", 4000, rules);
    assert_eq!(v.status, Status::Ok, "{}", v.reason);
    assert_eq!(v.complete, 1.0);
    // Live but stuck: the offset stays while records arrive.
    for i in 5..10 {
        t.observe("g", i * 1000, true, &[obs(0, Some(120), 120 + 10 * i)]);
    }
    let v = t.verdict("g", 9000, rules);
    assert_eq!(v.status, Status::Err, "{}", v.reason);
    assert_eq!(v.partitions[0].status, Status::Stall, "{}", v.reason);
    // The consumer leaves: no more commits enter; once the last is older than the window
    // spans (4 s), STOP.
    for i in 10..14 {
        t.observe("g", i * 1000, false, &[obs(0, Some(120), 220)]);
    }
    assert_eq!(
        t.verdict("g", 13_000, rules).partitions[0].status,
        Status::Stall,
        "4 s is not longer than 4 s"
    );
    assert_eq!(
        t.verdict("g", 13_500, rules).partitions[0].status,
        Status::Stop
    );
    // Offsets reset back (the group is empty): a commit enters, lower than the last.
    t.observe("g", 14_000, false, &[obs(0, Some(50), 220)]);
    let v = t.verdict("g", 14_000, rules);
    assert_eq!(v.partitions[0].status, Status::Rewind, "{}", v.reason);
    assert!(
        v.reason.contains("went back from 120 to 50"),
        "{}",
        v.reason
    );
    // Back and caught up.
    for (i, committed) in [100, 150, 200, 220, 220].into_iter().enumerate() {
        t.observe(
            "g",
            15_000 + i as i64 * 1000,
            true,
            &[obs(0, Some(committed), 220)],
        );
    }
    let v = t.verdict("g", 19_000, rules);
    assert_eq!(v.status, Status::Ok, "{}", v.reason);
    assert_eq!(v.reason, "every partition OK, no lag");
    // A partition the topic no longer has is dropped; one the known group has not
    // committed counts from its log start: its records wait, and once the group is gone
    // long enough it is STOP like any other.
    t.observe(
        "g",
        20_000,
        false,
        &[obs(0, Some(220), 220), obs(1, None, 7)],
    );
    let v = t.verdict("g", 20_000, rules);
    assert_eq!(
        v.partitions.iter().map(|p| p.partition).collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!((v.partitions[1].current_lag, v.total_lag), (7, 7));
    assert_eq!(v.partitions[1].status, Status::Stall, "{}", v.reason);
    assert_eq!(
        t.verdict("g", 20_001, rules).partitions[1].status,
        Status::Stop
    );
    t.observe("g", 21_000, true, &[obs(1, Some(0), 0)]);
    let v = t.verdict("g", 21_000, rules);
    assert_eq!(
        v.partitions.iter().map(|p| p.partition).collect::<Vec<_>>(),
        [1]
    );
}

/// A sampler that just started judges no window still filling: one commit is not a stop.
#[test]
fn a_window_still_filling_after_a_start_is_warming_up() {
    let rules = Rules {
        warm_up_ms: 5_000,
        ..Rules::default()
    };
    let mut t = Tracker::new(5);
    t.observe("g", 0, false, &[obs(0, Some(10), 40)]);
    let v = t.verdict("g", 1_000, rules);
    assert_eq!(v.status, Status::Ok, "{}", v.reason);
    assert_eq!(
        v.partitions[0].reason,
        "warming up: 1 of 5 commits in the window, lag 30"
    );
    // A window's time later, the consumer that never committed again is STOP.
    let v = t.verdict("g", 5_000, rules);
    assert_eq!(v.partitions[0].status, Status::Stop, "{}", v.reason);
    // A commit retention passed counts from the log start, as the consumer reads it.
    let mut t = Tracker::new(5);
    t.observe(
        "g",
        0,
        true,
        &[Observation {
            topic: "t".to_owned(),
            partition: 0,
            committed: Some(3),
            log_start: 8,
            log_end: 10,
        }],
    );
    assert_eq!(t.verdict("g", 0, Rules::default()).total_lag, 2);
}

/// A group that reads two topics (the analytics rollup: uploads and results) is judged over
/// both, as Burrow judges a group over every topic it commits: partition 0 of one topic is
/// not partition 0 of the other, and the reason names the topic.
#[test]
fn a_group_on_two_topics_is_judged_over_both() {
    let rules = Rules::default();
    let mut t = Tracker::new(3);
    for i in 0..3 {
        t.observe(
            "rollup",
            i * 1000,
            true,
            &[
                obs_on("doc.uploaded", 0, Some(50), 50),
                // Stuck at 10 while records arrive.
                obs_on("doc.processed", 0, Some(10), 20 + i),
            ],
        );
    }
    let v = t.verdict("rollup", 2000, rules);
    let seen: Vec<(&str, i32, Status)> = v
        .partitions
        .iter()
        .map(|p| (p.topic.as_str(), p.partition, p.status))
        .collect();
    assert_eq!(
        seen,
        [
            ("doc.processed", 0, Status::Stall),
            ("doc.uploaded", 0, Status::Ok)
        ]
    );
    assert_eq!(v.status, Status::Err);
    assert!(
        v.reason.starts_with("doc.processed partition 0 STALL"),
        "{}",
        v.reason
    );
    assert_eq!(
        (v.max_lag_topic.as_deref(), v.max_lag_partition, v.total_lag),
        (Some("doc.processed"), Some(0), 12)
    );
    // One topic only: the reason reads as before.
    let mut t = Tracker::new(3);
    for i in 0..3 {
        t.observe("g", i * 1000, true, &[obs(0, Some(10), 20 + i)]);
    }
    assert!(
        t.verdict("g", 2000, rules)
            .reason
            .starts_with("partition 0 STALL"),
        "{}",
        t.verdict("g", 2000, rules).reason
    );
}

#[test]
fn statuses_are_named_and_numbered_as_burrow_does() {
    let all = [
        Status::NotFound,
        Status::Ok,
        Status::Warn,
        Status::Err,
        Status::Stop,
        Status::Stall,
        Status::Rewind,
    ];
    for (i, s) in all.iter().enumerate() {
        assert_eq!(usize::from(s.level()), i);
        assert_eq!(
            serde_json::to_value(s).ok(),
            Some(serde_json::Value::from(s.as_str()))
        );
    }
}

/// `GROUP[=STAGE][@TOPIC[+TOPIC…]]`, read and written back.
#[test]
fn group_specs_name_their_stage_and_topics() {
    assert_eq!(
        GroupSpec::parse("thumbnails-x=thumbnails", "doc.uploaded"),
        GroupSpec {
            group: "thumbnails-x".into(),
            stage: "thumbnails".into(),
            topics: vec!["doc.uploaded".into()],
        }
    );
    assert_eq!(
        GroupSpec::parse("ocr-embeddings", "up").stage,
        "ocr-embeddings"
    );
    assert_eq!(
        GroupSpec::parse("analytics-rollup@doc.uploaded+doc.processed", "up"),
        GroupSpec {
            group: "analytics-rollup".into(),
            stage: "analytics-rollup".into(),
            topics: vec!["doc.uploaded".into(), "doc.processed".into()],
        }
    );
    assert_eq!(
        GroupSpec::parse(" r = rollup @ a + ", "up"),
        GroupSpec {
            group: "r".into(),
            stage: "rollup".into(),
            topics: vec!["a".into()],
        }
    );
    // `@` with no topic after it: the default topic; a topic named twice is read once.
    assert_eq!(GroupSpec::parse("g@", "up").topics, ["up"]);
    assert_eq!(GroupSpec::parse("g@a+b+a", "up").topics, ["a", "b"]);
    // Written as it is read.
    let r = GroupSpec::analytics_rollup("analytics-rollup-x1", "up", "done");
    assert_eq!(
        r.to_string(),
        "analytics-rollup-x1=analytics-rollup@up+done"
    );
    assert_eq!(GroupSpec::parse(&r.to_string(), "other"), r);
    let plain = GroupSpec::analytics_rollup("analytics-rollup", "up", "done");
    assert_eq!(plain.to_string(), "analytics-rollup@up+done");
}
