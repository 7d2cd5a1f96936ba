//! One model per process, fed by every worker: dynamic batching under a token budget.
//!
//! Each request (a document's chunks) gets its own lane; the model thread fills a batch
//! with every small lane whole (a page or two), then one text from each other lane in
//! turn, round-robin, while `longest × count` — the padded size of the batch, what the
//! model actually computes — stays within `--max-batch-tokens` (text-embeddings-inference's
//! rule). Fairness decides which texts fill a batch, never how many: a one-page document
//! that arrives behind documents of thousands of chunks is done in the next batch, not
//! behind all of them, and batches stay full. (Small documents arriving faster than the
//! model embeds them take every batch and hold large ones back: that is overload, which
//! the consumer lag shows and the autoscaler answers.)
//! There is no waiting window: a lone document is embedded at once, and under load the
//! lanes fill the next batch while the current one runs, so batches grow with the load by
//! themselves.

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

/// One request's texts not yet in a batch.
struct Lane {
    request: u64,
    items: VecDeque<Item>,
}

/// A lane with this many texts left or fewer (a page or two of text) is taken whole, before
/// the turns: a small document is done in the next batch, not a text a batch.
const SMALL_LANE: usize = 8;

/// Whether a text of `tokens` joins a batch of `len` texts whose longest is `longest`
/// within `budget` padded tokens (an empty batch takes any text).
fn fits(longest: usize, tokens: usize, len: usize, budget: usize) -> bool {
    len == 0 || longest.max(tokens) * (len + 1) <= budget
}

/// The next batch within `max_batch_tokens` padded tokens (at least one text): first every
/// small lane ([`SMALL_LANE`]) whole, in the order they came, then one text from each other
/// lane in turn. Lanes left with texts keep their turn order.
fn fill(lanes: &mut VecDeque<Lane>, max_batch_tokens: usize) -> Vec<Item> {
    let mut batch: Vec<Item> = Vec::new();
    let mut longest = 0;
    let mut i = 0;
    while i < lanes.len() {
        if lanes[i].items.len() > SMALL_LANE {
            i += 1;
            continue;
        }
        while let Some(item) = lanes[i].items.pop_front() {
            if !fits(longest, item.tokens, batch.len(), max_batch_tokens) {
                lanes[i].items.push_front(item);
                return batch;
            }
            longest = longest.max(item.tokens);
            batch.push(item);
        }
        drop(lanes.remove(i));
    }
    while let Some(mut lane) = lanes.pop_front() {
        let Some(item) = lane.items.pop_front() else {
            continue;
        };
        if !fits(longest, item.tokens, batch.len(), max_batch_tokens) {
            // Full: this lane goes first next time.
            lane.items.push_front(item);
            lanes.push_front(lane);
            break;
        }
        longest = longest.max(item.tokens);
        batch.push(item);
        if !lane.items.is_empty() {
            lanes.push_back(lane);
        }
    }
    batch
}

fn serve(embedder: &Embedder, rx: &mpsc::Receiver<Request>, max_batch_tokens: usize) {
    let mut lanes: VecDeque<Lane> = VecDeque::new();
    let mut pending: HashMap<u64, Pending> = HashMap::new();
    let mut next_id = 0u64;
    let mut admit =
        |req: Request, lanes: &mut VecDeque<Lane>, pending: &mut HashMap<u64, Pending>| {
            let id = next_id;
            next_id += 1;
            let n = req.texts.len();
            let items = req
                .texts
                .into_iter()
                .enumerate()
                .map(|(index, text)| {
                    // A text whose tokens cannot be counted is still embedded (the model call
                    // reports the real error); count it as a full window.
                    let tokens = embedder.token_count(&text).unwrap_or(crate::MAX_TOKENS);
                    Item {
                        request: id,
                        index,
                        text,
                        tokens,
                    }
                })
                .collect();
            lanes.push_back(Lane { request: id, items });
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
        if lanes.is_empty() {
            match rx.recv() {
                Ok(req) => admit(req, &mut lanes, &mut pending),
                Err(_) => return, // every handle dropped: the process is stopping
            }
        }
        while let Ok(req) = rx.try_recv() {
            admit(req, &mut lanes, &mut pending);
        }
        // A request nobody waits for any more (its handler stopped: a shutdown, a revoke)
        // costs the model nothing further.
        pending.retain(|_, p| p.reply.as_ref().is_some_and(|r| !r.is_closed()));
        lanes.retain(|l| pending.contains_key(&l.request));
        if lanes.is_empty() {
            continue;
        }
        let batch = fill(&mut lanes, max_batch_tokens);
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
                lanes.retain(|l| pending.contains_key(&l.request));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{embedder, reference};

    fn lane(request: u64, tokens: &[usize]) -> Lane {
        Lane {
            request,
            items: tokens
                .iter()
                .enumerate()
                .map(|(index, &tokens)| Item {
                    request,
                    index,
                    text: String::new(),
                    tokens,
                })
                .collect(),
        }
    }

    /// Small requests behind a large one go whole into the next batch; large ones take a
    /// text each in turn; every batch is as full as the budget allows.
    #[test]
    fn batches_take_small_requests_whole_then_large_ones_in_turn_and_stay_full() {
        let mut lanes: VecDeque<Lane> = [lane(0, &[10; 100]), lane(1, &[10]), lane(2, &[10, 10])]
            .into_iter()
            .collect();
        let batch = fill(&mut lanes, 60);
        let order: Vec<u64> = batch.iter().map(|i| i.request).collect();
        assert_eq!(order, [1, 2, 2, 0, 0, 0], "six texts of 10 tokens fill 60");
        // Only the large request is left, and it fills whole batches on its own.
        assert_eq!(lanes.len(), 1);
        let batch = fill(&mut lanes, 60);
        assert_eq!(batch.len(), 6);
        assert!(batch.iter().all(|i| i.request == 0));
        assert_eq!(lanes[0].items.len(), 100 - 3 - 6);
        // Two large requests share batches text by text.
        let mut lanes: VecDeque<Lane> = [lane(4, &[10; 20]), lane(5, &[10; 20])]
            .into_iter()
            .collect();
        let order: Vec<u64> = fill(&mut lanes, 40).iter().map(|i| i.request).collect();
        assert_eq!(order, [4, 5, 4, 5]);
        // A text longer than the budget still goes, alone.
        let mut lanes: VecDeque<Lane> = [lane(3, &[500, 10])].into_iter().collect();
        assert_eq!(fill(&mut lanes, 60).len(), 1);
        assert_eq!(fill(&mut lanes, 60).len(), 1);
        assert!(lanes.is_empty());
    }

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
