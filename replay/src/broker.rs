//! What a plan reads from the broker, and the one write a reset makes: partitions, log
//! start and end, a group's committed offsets and members, offsets by time (verified), and
//! a commit of new offsets for the group. Blocking librdkafka calls; the async API runs
//! them on blocking threads.

use std::time::Duration;

use docflow_config::KafkaArgs;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use docflow_runtime::Record;

use crate::ReplayError;

/// How long one broker request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A client acting for `group` (never joining it: partitions are assigned, not subscribed).
pub fn client(kafka: &KafkaArgs, group: &str) -> Result<BaseConsumer, ReplayError> {
    client_as(kafka, group, "docflow-replay")
}

/// [`client`] with its own `client.id` (what the broker's logs name it).
pub fn client_as(
    kafka: &KafkaArgs,
    group: &str,
    client_id: &str,
) -> Result<BaseConsumer, ReplayError> {
    kafka
        .client_config(client_id)
        // Reads here are short and bounded: no large prefetch per partition.
        .set("queued.max.messages.kbytes", "4096")
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // The end of a partition is an answer ("nothing at or after here"), not a wait.
        .set("enable.partition.eof", "true")
        // An offset the log no longer has is an error, never a silent jump to an end.
        .set("auto.offset.reset", "error")
        .create()
        .map_err(ReplayError::kafka("creating a client"))
}

/// Partition numbers of `topic`.
pub fn partitions(c: &BaseConsumer, topic: &str) -> Result<Vec<i32>, ReplayError> {
    let md = c
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(ReplayError::kafka("metadata"))?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        .ok_or_else(|| ReplayError::NoSuchTopic(topic.to_owned()))?;
    let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Log start and end of one partition.
pub fn watermarks(
    c: &BaseConsumer,
    topic: &str,
    partition: i32,
) -> Result<(i64, i64), ReplayError> {
    c.fetch_watermarks(topic, partition, TIMEOUT)
        .map_err(ReplayError::kafka("watermarks"))
}

/// The group's committed offset per partition (`None`: nothing committed).
pub fn committed(
    c: &BaseConsumer,
    topic: &str,
    partitions: &[i32],
) -> Result<Vec<Option<i64>>, ReplayError> {
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition(topic, p);
    }
    let got = c
        .committed_offsets(tpl, TIMEOUT)
        .map_err(ReplayError::kafka("committed offsets"))?;
    Ok(partitions
        .iter()
        .map(
            |&p| match got.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o),
                _ => None,
            },
        )
        .collect())
}

/// Members of `group` (empty when nobody consumes).
pub fn members(c: &BaseConsumer, group: &str) -> Result<Vec<String>, ReplayError> {
    let list = c
        .fetch_group_list(Some(group), TIMEOUT)
        .map_err(ReplayError::kafka("describing the group"))?;
    Ok(list
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .flat_map(|g| {
            g.members()
                .iter()
                .map(|m| member_name(m.id(), m.client_id(), m.client_host()))
        })
        .collect())
}

/// Commits `offsets` (partition, offset) of `topic` for the client's group.
pub fn commit(c: &BaseConsumer, topic: &str, offsets: &[(i32, i64)]) -> Result<(), ReplayError> {
    let mut tpl = TopicPartitionList::new();
    for &(p, o) in offsets {
        tpl.add_partition_offset(topic, p, Offset::Offset(o))
            .map_err(ReplayError::kafka("building the commit"))?;
    }
    c.commit(&tpl, CommitMode::Sync)
        .map_err(ReplayError::kafka("committing the new offsets"))
}

/// The broker's answer to "first offset with a timestamp at or after `ts_ms`" (ListOffsets
/// by time); `None` when it has none (every record is earlier).
pub fn offset_for_time(
    c: &BaseConsumer,
    topic: &str,
    partition: i32,
    ts_ms: i64,
) -> Result<Option<i64>, ReplayError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(ts_ms))
        .map_err(ReplayError::kafka("building ListOffsets"))?;
    let got = c
        .offsets_for_times(tpl, TIMEOUT)
        .map_err(ReplayError::kafka("ListOffsets by time"))?;
    Ok(
        match got.find_partition(topic, partition).map(|e| e.offset()) {
            Some(Offset::Offset(o)) if o >= 0 => Some(o),
            _ => None,
        },
    )
}

/// The first record at or after `offset` in the partition: its offset and timestamp (ms);
/// `None` when the partition has none there (its end). No answer in time is an error, not
/// "none": the time search must not take a slow fetch for the end of the log.
pub fn record_at(
    c: &BaseConsumer,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<Option<(i64, i64)>, ReplayError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
        .map_err(ReplayError::kafka("building the assignment"))?;
    c.assign(&tpl)
        .map_err(ReplayError::kafka("assigning for a read"))?;
    let read = (|| {
        let deadline = std::time::Instant::now() + TIMEOUT;
        while std::time::Instant::now() < deadline {
            match c.poll(Duration::from_millis(200)) {
                Some(Ok(m))
                    if m.topic() == topic && m.partition() == partition && m.offset() >= offset =>
                {
                    let ts = m.timestamp().to_millis().unwrap_or(i64::MIN);
                    return Ok(Some((m.offset(), ts)));
                }
                Some(Err(KafkaError::PartitionEOF(p))) if p == partition => return Ok(None),
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => return Err(ReplayError::kafka("reading a record")(e)),
                _ => {}
            }
        }
        Err(ReplayError::Task(format!(
            "no answer reading {topic} [{partition}] at {offset} within {TIMEOUT:?}"
        )))
    })();
    // Nothing keeps fetching in the background for a read that is over.
    let _ = c.unassign();
    read
}

/// The newest `n` records of each partition of `topic` (none when it does not exist), in no
/// particular order: what a console shows of a dead-letter topic.
pub fn tail(c: &BaseConsumer, topic: &str, n: i64) -> Result<Vec<Record>, ReplayError> {
    read_to_end(
        c,
        topic,
        |_, start, end| Ok((end - n.max(1)).max(start)),
        TIMEOUT,
    )
}

/// Every record of `topic` from the offset `from(partition, log start, log end)` of each
/// partition (an error from `from` ends the read) to the end that partition had when the
/// read began (none when the topic does not exist). A read that gets no record for `stall` fails: a large topic is fine, a
/// stalled read is not.
pub fn read_to_end(
    c: &BaseConsumer,
    topic: &str,
    mut from: impl FnMut(i32, i64, i64) -> Result<i64, ReplayError>,
    stall: Duration,
) -> Result<Vec<Record>, ReplayError> {
    let ids = match partitions(c, topic) {
        Ok(p) => p,
        // Nothing written yet: no topic yet.
        Err(ReplayError::NoSuchTopic(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut ends = std::collections::BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    let mut starts = std::collections::BTreeMap::new();
    for p in ids {
        let (start, end) = watermarks(c, topic, p)?;
        if end > start {
            let at = from(p, start, end)?.clamp(start, end);
            ends.insert(p, end);
            starts.insert(p, at);
            tpl.add_partition_offset(topic, p, Offset::Offset(at))
                .map_err(ReplayError::kafka("building the assignment"))?;
        }
    }
    if ends.is_empty() {
        return Ok(Vec::new());
    }
    c.assign(&tpl)
        .map_err(ReplayError::kafka("assigning for a read"))?;
    let read = (|| {
        let mut out = Vec::new();
        let mut deadline = std::time::Instant::now() + stall;
        while !ends.is_empty() {
            if std::time::Instant::now() > deadline {
                return Err(ReplayError::Task(format!(
                    "reading {topic}: nothing for {stall:?} before its end"
                )));
            }
            match c.poll(Duration::from_millis(200)) {
                // A record of an earlier read still in flight is not this read's.
                Some(Ok(m))
                    if m.topic() == topic
                        && starts.get(&m.partition()).is_some_and(|s| m.offset() >= *s) =>
                {
                    deadline = std::time::Instant::now() + stall;
                    let end = ends.get(&m.partition()).copied().unwrap_or(0);
                    if m.offset() < end {
                        out.push(Record::from_message(&m));
                    }
                    if m.offset() + 1 >= end {
                        ends.remove(&m.partition());
                    }
                }
                // The end (records at the tail can be missing: compaction, control records).
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    ends.remove(&p);
                }
                Some(Err(e)) => return Err(ReplayError::kafka("reading a record")(e)),
                Some(Ok(_)) | None => {}
            }
        }
        Ok(out)
    })();
    let _ = c.unassign();
    read
}

/// A group member as an operator can find it: its client id (else its member id), and the
/// host it connects from when the broker knows it.
fn member_name(id: &str, client_id: &str, host: &str) -> String {
    let who = if client_id.is_empty() { id } else { client_id };
    let who = if who.is_empty() { "a member" } else { who };
    if host.is_empty() {
        who.to_owned()
    } else {
        format!("{who} at {host}")
    }
}

#[cfg(test)]
mod tests {
    use super::member_name;

    #[test]
    fn a_member_is_named_by_what_the_broker_knows() {
        assert_eq!(
            member_name("m-1", "docflow-thumbnails", "/10.0.0.7"),
            "docflow-thumbnails at /10.0.0.7"
        );
        assert_eq!(member_name("m-1", "", ""), "m-1");
        assert_eq!(member_name("", "", ""), "a member");
    }
}
