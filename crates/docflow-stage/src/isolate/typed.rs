//! The typed worker protocol on top of [`WorkerPool`]: a stage's worker is an [`Isolated`]
//! type, started in each worker process with its [`Isolated::Settings`] (a serde value, so
//! every setting the stage holds reaches the worker as it is: nothing is written back out as
//! flags to be parsed again), answering each job with an [`Isolated::Answer`] (a serde value)
//! and, beside it, raw bytes (a PNG), or refusing the document with a [`Refusal`]: one of the
//! stage's declared [`Isolated::CLASSES`] and a message. The stage side is [`Workers`]; the
//! worker side is [`serve`], which [`crate::main`] calls when the binary is started as a
//! worker.
//!
//! On the wire (inside the raw protocol's payloads): the settings are one JSON argument after
//! `--`; an answer is a 4-byte big-endian length, that many bytes of JSON, then the raw bytes;
//! a refusal is JSON `{"class", "message", "transient"}`.

use std::marker::PhantomData;

use docflow_runtime::HandlerError;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::{IsolationArgs, IsolationError, WorkerInvocation, WorkerPool};

/// Any error a worker's start may fail with (it ends the worker; the stage sees a crash with
/// the worker's last words, at its start-up probe).
pub type StartError = Box<dyn std::error::Error + Send + Sync>;

/// What an isolated stage's worker does: loads what it needs once per process, then answers
/// one job at a time. Implemented by each isolated stage; see `docs/adding-a-stage.md`.
pub trait Isolated: Sized + 'static {
    /// What a worker is started with.
    type Settings: Serialize + DeserializeOwned + Clone + Send + Sync + 'static;
    /// A job's answer (beside its raw bytes, see [`Reply`]).
    type Answer: Serialize + DeserializeOwned + Send + 'static;
    /// The classes a refusal may carry; a class outside them is reported as the first (so
    /// no text from a worker becomes a dead-letter class).
    const CLASSES: &'static [&'static str];

    /// Loads the worker's libraries and models (in the worker process, before its first job).
    fn start(settings: Self::Settings) -> Result<Self, StartError>;

    /// One job.
    fn run(&mut self, job: &[u8]) -> Result<Reply<Self::Answer>, Refusal>;

    /// A job every healthy worker answers: the start-up probe of [`Workers::start`], so a
    /// missing library or model fails the stage's start, not every document.
    fn probe() -> Vec<u8>;
}

/// A job's answer: a serde value and raw bytes beside it (a rendered image), which travel
/// as they are instead of inside the JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply<T> {
    /// The answer.
    pub value: T,
    /// Raw bytes (empty when the answer has none).
    pub bytes: Vec<u8>,
}

impl<T> Reply<T> {
    /// `value`, no raw bytes.
    pub fn new(value: T) -> Self {
        Reply {
            value,
            bytes: Vec::new(),
        }
    }

    /// With `bytes` beside the value.
    pub fn with_bytes(mut self, bytes: Vec<u8>) -> Self {
        self.bytes = bytes;
        self
    }
}

/// A document refused by a worker: why, as one of the stage's classes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// One of the worker's [`Isolated::CLASSES`].
    pub class: &'static str,
    /// What is wrong with the document.
    pub message: String,
    /// A problem of the worker, not the document (a library that does not load): retried
    /// instead of dead-lettered at once.
    pub transient: bool,
}

impl Refusal {
    /// The document cannot be read: dead-lettered as `class`.
    pub fn new(class: &'static str, message: impl ToString) -> Self {
        Refusal {
            class,
            message: message.to_string(),
            transient: false,
        }
    }

    /// The worker cannot do its work (its setup), whatever the document: retried.
    pub fn transient(class: &'static str, message: impl ToString) -> Self {
        Refusal {
            transient: true,
            ..Refusal::new(class, message)
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A refusal as it crosses the pipe.
#[derive(Serialize, Deserialize)]
struct WireRefusal {
    class: String,
    message: String,
    #[serde(default)]
    transient: bool,
}

/// The isolated workers of a stage whose worker is `W`.
pub struct Workers<W: Isolated> {
    pool: WorkerPool,
    worker: PhantomData<fn() -> W>,
}

impl<W: Isolated> std::fmt::Debug for Workers<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers").field("pool", &self.pool).finish()
    }
}

impl<W: Isolated> Workers<W> {
    /// Workers started (when a job needs one) with `settings`, under `limits`.
    pub fn new(limits: IsolationArgs, settings: &W::Settings) -> Result<Self, IsolationError> {
        let settings = serde_json::to_string(settings).map_err(|e| IsolationError::Io {
            context: "writing the worker's settings",
            source: std::io::Error::other(e),
        })?;
        Ok(Workers {
            pool: WorkerPool::new(limits, vec![settings])?,
            worker: PhantomData,
        })
    }

    /// [`Workers::new`], then one worker started and probed with [`Isolated::probe`]: a
    /// missing library or a bad `--worker-exe` fails here, with the worker's reason.
    pub async fn start(
        limits: IsolationArgs,
        settings: &W::Settings,
    ) -> Result<Self, IsolationError> {
        let workers = Self::new(limits, settings)?;
        workers.run(&W::probe()).await?;
        Ok(workers)
    }

    /// Runs one job in a worker: its answer, or why there is none ([`IsolationError::Refused`]
    /// for the document's own refusal).
    pub async fn run(&self, job: &[u8]) -> Result<Reply<W::Answer>, IsolationError> {
        match self.pool.run(job).await {
            Ok(answer) => decode_reply(answer),
            Err(IsolationError::Job(payload)) => Err(decode_refusal::<W>(&payload)),
            Err(e) => Err(e),
        }
    }

    /// Workers that may run at once (0: no bound).
    pub fn max_workers(&self) -> usize {
        self.pool.max_workers()
    }
}

/// The class of an answer that does not decode (or that its worker could not encode).
const MALFORMED: &str = "malformed_answer";

/// The value and the raw bytes of `answer`; the bytes keep `answer`'s buffer (a thumbnail's
/// PNG is not copied again).
fn decode_reply<T: DeserializeOwned>(mut answer: Vec<u8>) -> Result<Reply<T>, IsolationError> {
    let malformed = |detail: String| IsolationError::Malformed { detail };
    let len = answer
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| malformed(format!("an answer of {} bytes", answer.len())))?;
    let end = 4usize.saturating_add(len as usize);
    let json = answer
        .get(4..end)
        .ok_or_else(|| malformed(format!("a {len}-byte value in {} bytes", answer.len())))?;
    let value = serde_json::from_slice(json).map_err(|e| malformed(e.to_string()))?;
    answer.drain(..end);
    Ok(Reply {
        value,
        bytes: answer,
    })
}

fn decode_refusal<W: Isolated>(payload: &str) -> IsolationError {
    match serde_json::from_str::<WireRefusal>(payload) {
        // The worker could not encode its own answer.
        Ok(r) if r.class == MALFORMED => IsolationError::Malformed { detail: r.message },
        Ok(r) => IsolationError::Refused(Refusal {
            class: W::CLASSES
                .iter()
                .copied()
                .find(|c| *c == r.class)
                .or_else(|| W::CLASSES.first().copied())
                .unwrap_or("refused"),
            message: r.message,
            transient: r.transient,
        }),
        Err(e) => IsolationError::Malformed {
            detail: format!("a refusal that does not parse ({e})"),
        },
    }
}

fn encode_reply<T: Serialize>(reply: Result<Reply<T>, Refusal>) -> Result<Vec<u8>, String> {
    let refuse = |r: Refusal| {
        serde_json::to_string(&WireRefusal {
            class: r.class.to_owned(),
            message: r.message,
            transient: r.transient,
        })
        .unwrap_or_else(|_| "{}".to_owned())
    };
    let reply = reply.map_err(refuse)?;
    let json = serde_json::to_vec(&reply.value).map_err(|e| refuse(Refusal::new(MALFORMED, e)))?;
    let len = u32::try_from(json.len())
        .map_err(|_| refuse(Refusal::new(MALFORMED, "an answer over 4 GiB")))?;
    let mut out = Vec::with_capacity(4 + json.len() + reply.bytes.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&reply.bytes);
    Ok(out)
}

/// Why a worker process could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The settings argument is missing or does not parse.
    #[error("worker settings: {0}")]
    Settings(String),
    /// The worker's start failed.
    #[error("worker start: {0}")]
    Start(#[source] StartError),
    /// The pipes to the stage failed.
    #[error("worker pipes: {0}")]
    Io(#[from] std::io::Error),
}

/// This process as a worker of type `W`: reads its settings, limits itself, starts `W` and
/// answers jobs until the stage closes its stdin.
pub fn serve<W: Isolated>(invocation: WorkerInvocation) -> Result<(), ServeError> {
    let settings = match invocation.stage_args.as_slice() {
        [json] => serde_json::from_str::<W::Settings>(json)
            .map_err(|e| ServeError::Settings(e.to_string()))?,
        other => {
            return Err(ServeError::Settings(format!(
                "expected one JSON argument, got {}",
                other.len()
            )));
        }
    };
    let mut worker = W::start(settings).map_err(ServeError::Start)?;
    invocation.serve(|job| encode_reply(worker.run(job)))?;
    Ok(())
}

impl IsolationError {
    /// As the stage layer's error, its message after `context` (e.g. `page 3: `): a worker
    /// that cannot be started, or a refusal marked transient, is a problem of this replica
    /// (retried); every other failure is the document's (dead-lettered with its class).
    pub fn into_handler_error(self, context: &str) -> HandlerError {
        match self {
            IsolationError::Refused(r) if r.transient => {
                HandlerError::transient(r.class, format!("{context}{}", r.message))
            }
            IsolationError::Refused(r) => {
                HandlerError::permanent(r.class, format!("{context}{}", r.message))
            }
            e @ IsolationError::Io { .. } => {
                HandlerError::transient(e.class(), format!("{context}{e}"))
            }
            e => HandlerError::permanent(e.class(), format!("{context}{e}")),
        }
    }
}

/// A stage without isolated workers (its work runs in the stage's process): no value of it
/// exists.
#[derive(Debug)]
pub enum InProcess {}

impl Isolated for InProcess {
    type Settings = ();
    type Answer = ();
    const CLASSES: &'static [&'static str] = &[];

    fn start(_: ()) -> Result<Self, StartError> {
        Err("this stage has no isolated workers".into())
    }

    fn run(&mut self, _: &[u8]) -> Result<Reply<()>, Refusal> {
        match *self {}
    }

    fn probe() -> Vec<u8> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;
    impl Isolated for Echo {
        type Settings = u32;
        type Answer = String;
        const CLASSES: &'static [&'static str] = &["unreadable", "setup"];
        fn start(_: u32) -> Result<Self, StartError> {
            Ok(Echo)
        }
        fn run(&mut self, _: &[u8]) -> Result<Reply<String>, Refusal> {
            Ok(Reply::new(String::new()))
        }
        fn probe() -> Vec<u8> {
            Vec::new()
        }
    }

    #[test]
    fn a_reply_carries_its_value_and_raw_bytes() {
        let wire = encode_reply(Ok(
            Reply::new("a value".to_owned()).with_bytes(vec![0, 255, 10])
        ))
        .unwrap();
        let back: Reply<String> = decode_reply(wire).unwrap();
        assert_eq!(back.value, "a value");
        assert_eq!(back.bytes, vec![0, 255, 10]);
        for bad in [&b""[..], b"\0\0", b"\0\0\0\x09{}", b"\0\0\0\x02{x"] {
            assert_eq!(
                decode_reply::<String>(bad.to_vec()).unwrap_err().class(),
                "malformed_answer"
            );
        }
    }

    #[test]
    fn a_refusal_keeps_a_declared_class_and_never_takes_a_workers_text_as_one() {
        let wire =
            encode_reply::<String>(Err(Refusal::transient("setup", "no pdfium"))).unwrap_err();
        match decode_refusal::<Echo>(&wire) {
            IsolationError::Refused(r) => {
                assert_eq!(
                    (r.class, r.message.as_str(), r.transient),
                    ("setup", "no pdfium", true)
                );
            }
            other => panic!("{other:?}"),
        }
        let wire = encode_reply::<String>(Err(Refusal::new("<script>", "x"))).unwrap_err();
        let e = decode_refusal::<Echo>(&wire);
        assert_eq!(e.class(), "unreadable");
        assert_eq!(e.to_string(), "x");
        assert_eq!(
            decode_refusal::<Echo>("class\nmessage").class(),
            "malformed_answer"
        );
        let wire = encode_reply::<String>(Err(Refusal::new(MALFORMED, "no JSON"))).unwrap_err();
        assert_eq!(decode_refusal::<Echo>(&wire).class(), "malformed_answer");
    }

    #[test]
    fn the_handler_error_is_transient_only_for_the_replicas_own_problems() {
        let refused = |transient| {
            IsolationError::Refused(Refusal {
                class: "unreadable",
                message: "corrupt".into(),
                transient,
            })
        };
        let e = refused(false).into_handler_error("page 2: ");
        assert!(
            matches!(e, HandlerError::Permanent { class: "unreadable", ref message } if message == "page 2: corrupt")
        );
        assert!(matches!(
            refused(true).into_handler_error(""),
            HandlerError::Transient { .. }
        ));
        let io = IsolationError::Io {
            context: "spawning",
            source: std::io::Error::other("no such file"),
        };
        assert!(matches!(
            io.into_handler_error(""),
            HandlerError::Transient {
                class: "worker_io",
                ..
            }
        ));
        let crash = IsolationError::Crashed {
            detail: "signal 11".into(),
        };
        assert!(matches!(
            crash.into_handler_error(""),
            HandlerError::Permanent {
                class: "worker_crashed",
                ..
            }
        ));
    }
}
