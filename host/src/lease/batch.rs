//! Lease calls in batches. The attempts a host starts together (a turn's
//! dispatches arrive together) take their leases in one script call, and
//! the attempts that end together release theirs in one: one request to
//! Redis and one script run for all, instead of one each.
//!
//! A batch is whatever waits when the previous call has returned, at most
//! [`MAX_BATCH`]: a lone call goes out at once, never held back to wait for
//! company. Each attempt gets its own answer; a call that fails fails every
//! attempt it carried, and each attempt then handles its failure as it
//! would its own.

use super::LeaseError;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use tokio::sync::{mpsc, oneshot};

/// Most attempts one script call carries.
const MAX_BATCH: usize = 64;

/// One kind of lease call that many attempts can share.
pub(super) trait Call: Send + Sync + 'static {
    /// What one attempt brings to the call.
    type Item: Send + 'static;
    /// What one attempt learns from it.
    type Answer: Send + 'static;

    /// One script call for the whole batch: an answer per item, in order.
    fn call(
        &self,
        items: Vec<Self::Item>,
    ) -> impl Future<Output = Result<Vec<Self::Answer>, LeaseError>> + Send;
}

/// One attempt waiting for its batch.
struct Waiting<C: Call> {
    item: C::Item,
    reply: oneshot::Sender<Result<C::Answer, String>>,
}

/// The queue of one kind of call, served by a task started on first use
/// (inside the host's runtime); the task ends with the queue.
pub(super) struct Batched<C: Call> {
    call: Arc<C>,
    queue: OnceLock<mpsc::UnboundedSender<Waiting<C>>>,
}

impl<C: Call> Batched<C> {
    pub(super) fn new(call: C) -> Self {
        Self {
            call: Arc::new(call),
            queue: OnceLock::new(),
        }
    }

    /// Joins the next batch and waits for this item's answer.
    pub(super) async fn ask(&self, item: C::Item) -> Result<C::Answer, LeaseError> {
        let (reply, answer) = oneshot::channel();
        let gone = || LeaseError::Batch("the lease batches have stopped".into());
        self.queue()
            .send(Waiting { item, reply })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?.map_err(LeaseError::Batch)
    }

    fn queue(&self) -> &mpsc::UnboundedSender<Waiting<C>> {
        self.queue.get_or_init(|| {
            let (queue, waiting) = mpsc::unbounded_channel();
            tokio::spawn(serve(self.call.clone(), waiting));
            queue
        })
    }
}

/// Serves the queue until its sender is gone.
async fn serve<C: Call>(call: Arc<C>, mut queue: mpsc::UnboundedReceiver<Waiting<C>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (items, replies): (Vec<_>, Vec<_>) = batch.drain(..).map(|w| (w.item, w.reply)).unzip();
        let carried = items.len();
        match call.call(items).await {
            Ok(answers) if answers.len() == carried => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Ok(answers) => {
                let reason = LeaseError::Protocol(format!(
                    "{} answers for {carried} attempts",
                    answers.len()
                ))
                .to_string();
                fail(replies, &reason);
            }
            Err(e) => fail(replies, &e.to_string()),
        }
    }
}

fn fail<A>(replies: Vec<oneshot::Sender<Result<A, String>>>, reason: &str) {
    for reply in replies {
        let _ = reply.send(Err(reason.to_owned()));
    }
}
