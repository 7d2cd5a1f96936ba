//! One model per process, fed by every worker: dynamic batching under a token budget.
//!
//! Requests (each a document's chunks) queue in arrival order. The model thread takes the
//! queue's head and keeps taking texts, in order, while `longest × count` — the padded size
//! of the batch, what the model actually computes — stays within `--max-batch-tokens`
//! (text-embeddings-inference's rule). There is no waiting window: a lone document is
//! embedded at once, and under load the queue fills the next batch while the current one
//! runs, so batches grow with the load by themselves.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, mpsc};

use tokio::sync::oneshot;

use crate::{Chunk, EmbedError, Embedder};

type Reply = oneshot::Sender<Result<Vec<Vec<f32>>, EmbedError>>;

struct Request {
    texts: Vec<String>,
    reply: Reply,
}

/// A handle to the model thread; cheap to clone.
#[derive(Debug, Clone)]
pub struct Batcher {
    tx: mpsc::Sender<Request>,
    /// The model thread's embedder, shared for its tokenizer (chunking, counting).
    embedder: Arc<Embedder>,
}

struct Pending {
    vectors: Vec<Vec<f32>>,
    left: usize,
    reply: Option<Reply>,
}

struct Item {
    request: u64,
    index: usize,
    text: String,
    tokens: usize,
}

impl Batcher {
    /// Starts the model thread with `embedder`; batches hold at most `max_batch_tokens`
    /// padded tokens (and always at least one text).
    pub fn start(embedder: Embedder, max_batch_tokens: usize) -> Result<Self, EmbedError> {
        let (tx, rx) = mpsc::channel::<Request>();
        let embedder = Arc::new(embedder);
        let model = embedder.clone();
        std::thread::Builder::new()
            .name("embed-batcher".into())
            .spawn(move || serve(&model, &rx, max_batch_tokens))
            .map_err(EmbedError::Thread)?;
        Ok(Batcher { tx, embedder })
    }

    /// `text` cut into chunks the model sees whole ([`Embedder::chunks`]); tokenizing only,
    /// on the caller's thread.
    pub fn chunks(&self, text: &str, overlap: usize) -> Result<Vec<Chunk>, EmbedError> {
        self.embedder.chunks(text, overlap)
    }

    /// Where the model runs, for logs.
    pub fn device(&self) -> &str {
        self.embedder.device()
    }

    /// The unit vectors of `texts`, in order.
    pub async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Request { texts, reply })
            .map_err(|_| EmbedError::Stopped)?;
        answer.await.map_err(|_| EmbedError::Stopped)?
    }
}

fn serve(embedder: &Embedder, rx: &mpsc::Receiver<Request>, max_batch_tokens: usize) {
    let mut queue: VecDeque<Item> = VecDeque::new();
    let mut pending: HashMap<u64, Pending> = HashMap::new();
    let mut next_id = 0u64;
    let mut admit =
        |req: Request, queue: &mut VecDeque<Item>, pending: &mut HashMap<u64, Pending>| {
            let id = next_id;
            next_id += 1;
            let n = req.texts.len();
            for (index, text) in req.texts.into_iter().enumerate() {
                // A text whose tokens cannot be counted is still embedded (the model call reports
                // the real error); count it as a full window.
                let tokens = embedder.token_count(&text).unwrap_or(crate::MAX_TOKENS);
                queue.push_back(Item {
                    request: id,
                    index,
                    text,
                    tokens,
                });
            }
            pending.insert(
                id,
                Pending {
                    vectors: vec![Vec::new(); n],
                    left: n,
                    reply: Some(req.reply),
                },
            );
        };
    loop {
        if queue.is_empty() {
            match rx.recv() {
                Ok(req) => admit(req, &mut queue, &mut pending),
                Err(_) => return, // every handle dropped: the process is stopping
            }
        }
        while let Ok(req) = rx.try_recv() {
            admit(req, &mut queue, &mut pending);
        }
        let mut batch: Vec<Item> = Vec::new();
        let mut longest = 0;
        while let Some(item) = queue.front() {
            let padded = longest.max(item.tokens) * (batch.len() + 1);
            if !batch.is_empty() && padded > max_batch_tokens {
                break;
            }
            longest = longest.max(item.tokens);
            if let Some(item) = queue.pop_front() {
                batch.push(item);
            }
        }
        let texts: Vec<&str> = batch.iter().map(|i| i.text.as_str()).collect();
        match embedder.embed(&texts) {
            Ok(vectors) => {
                for (item, vector) in batch.iter().zip(vectors) {
                    let Some(p) = pending.get_mut(&item.request) else {
                        continue;
                    };
                    if let Some(slot) = p.vectors.get_mut(item.index) {
                        *slot = vector;
                    }
                    p.left -= 1;
                    if p.left == 0
                        && let Some(p) = pending.remove(&item.request)
                        && let Some(reply) = p.reply
                    {
                        let _ = reply.send(Ok(p.vectors));
                    }
                }
            }
            Err(e) => {
                // The whole batch failed: every request with a text in it fails (their other
                // texts still queued are dropped), with the model's message.
                let message = e.to_string();
                for item in &batch {
                    if let Some(p) = pending.remove(&item.request)
                        && let Some(reply) = p.reply
                    {
                        let _ = reply.send(Err(EmbedError::Batch(message.clone())));
                    }
                }
                queue.retain(|i| pending.contains_key(&i.request));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{embedder, reference};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_in_small_batches_get_their_own_vectors() {
        let cases = reference();
        // A budget of 64 padded tokens splits most requests over several batches, and the
        // long text goes alone.
        let batcher = Batcher::start(embedder(), 64).unwrap();
        let mut tasks = Vec::new();
        for (text, _, want) in cases.clone() {
            let b = batcher.clone();
            tasks.push(tokio::spawn(async move {
                let got = b
                    .embed(vec![text.clone(), "hello".to_owned()])
                    .await
                    .unwrap();
                (text, want, got)
            }));
        }
        let hello = &cases[1].2;
        for t in tasks {
            let (text, want, got) = t.await.unwrap();
            assert_eq!(got.len(), 2);
            assert!(crate::cosine(&got[0], &want) >= 0.9999, "{text:?}");
            assert!(crate::cosine(&got[1], hello) >= 0.9999);
        }
        assert!(batcher.embed(Vec::new()).await.unwrap().is_empty());
    }
}
