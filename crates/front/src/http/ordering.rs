//! The order of what one request's response carries: the messages related to it (progress, a
//! server's request the call caused) as they come, every one sent before the answer ahead of
//! it, then the answer, then nothing. What relates to the request after its answer goes to the
//! session's own stream instead.
//!
//! It never frames (JSON or event stream is the routes' choice), never reads a message, and
//! never queues beyond the related channel it is given (bounded by whoever made it).

use std::collections::VecDeque;

use futures::future::BoxFuture;
use tokio::sync::mpsc;

/// What a request's response carries, in order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Part {
    Related(String),
    Answer(String),
}

/// The messages of one request: the related ones as they come, then the answer, then none.
/// `G` is what must live as long as they are read (the call's task, its place among the
/// requests in flight, its hold on the session); dropping the messages drops it.
pub(crate) struct CallMessages<G> {
    /// What was drained from `related` when the answer came, and the answer: at most the
    /// related channel's bound plus one.
    pending: VecDeque<Part>,
    /// `None` once closed (after the answer) or once every sender is gone.
    related: Option<mpsc::Receiver<String>>,
    /// `None` once the answer is queued.
    /// Its text resolves `None` for a request its client cancelled: the stream ends without one.
    answer: Option<BoxFuture<'static, Option<String>>>,
    _guard: G,
}

impl<G> CallMessages<G> {
    pub(crate) fn new(
        related: mpsc::Receiver<String>,
        answer: BoxFuture<'static, Option<String>>,
        guard: G,
    ) -> Self {
        Self {
            pending: VecDeque::new(),
            related: Some(related),
            answer: Some(answer),
            _guard: guard,
        }
    }

    /// The next part, in order; `None` after the answer (or once a cancelled request's related
    /// messages are out).
    pub(crate) async fn next(&mut self) -> Option<Part> {
        loop {
            if let Some(part) = self.pending.pop_front() {
                return Some(part);
            }
            let Self {
                pending,
                related,
                answer,
                ..
            } = self;
            let waiting = answer.as_mut()?;
            tokio::select! {
                // The answer first: what came before it is drained, in order, ahead of it.
                biased;
                text = waiting => {
                    *answer = None;
                    if let Some(mut receiver) = related.take() {
                        // Closed first: what relates to the request from now on goes to the
                        // session's own stream instead.
                        receiver.close();
                        while let Ok(message) = receiver.try_recv() {
                            pending.push_back(Part::Related(message));
                        }
                    }
                    if let Some(text) = text {
                        pending.push_back(Part::Answer(text));
                    }
                }
                message = recv(related) => match message {
                    Some(message) => return Some(Part::Related(message)),
                    None => *related = None,
                },
            }
        }
    }
}

/// The next message of a receiver that may be gone (then never).
async fn recv(receiver: &mut Option<mpsc::Receiver<String>>) -> Option<String> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn messages(answer: Option<&str>) -> (mpsc::Sender<String>, CallMessages<()>) {
        let (related_tx, related) = mpsc::channel(8);
        let answer = answer.map(str::to_string);
        (
            related_tx,
            CallMessages::new(related, async move { answer }.boxed(), ()),
        )
    }

    #[tokio::test]
    async fn what_came_before_the_answer_goes_ahead_of_it_even_when_the_answer_is_ready() {
        let (related, mut call) = messages(Some("answer"));
        related.send("progress 1".into()).await.unwrap();
        related.send("progress 2".into()).await.unwrap();
        assert_eq!(call.next().await, Some(Part::Related("progress 1".into())));
        assert_eq!(call.next().await, Some(Part::Related("progress 2".into())));
        assert_eq!(call.next().await, Some(Part::Answer("answer".into())));
        assert_eq!(call.next().await, None);
        // After the answer, nothing more is taken: the session's stream gets it.
        assert!(related.send("late".into()).await.is_err());
    }

    #[tokio::test]
    async fn a_call_with_nothing_related_is_its_answer_alone() {
        let (_related, mut call) = messages(Some("answer"));
        assert_eq!(call.next().await, Some(Part::Answer("answer".into())));
        assert_eq!(call.next().await, None);
    }

    #[tokio::test]
    async fn related_messages_come_as_they_come_while_the_answer_waits() {
        let (related_tx, related) = mpsc::channel(8);
        let (answer_tx, answer) = tokio::sync::oneshot::channel::<String>();
        let mut call = CallMessages::new(related, async move { answer.await.ok() }.boxed(), ());
        related_tx.send("progress".into()).await.unwrap();
        assert_eq!(call.next().await, Some(Part::Related("progress".into())));
        answer_tx.send("answer".into()).unwrap();
        assert_eq!(call.next().await, Some(Part::Answer("answer".into())));
    }

    #[tokio::test]
    async fn a_cancelled_call_ends_after_its_related_messages_without_an_answer() {
        let (related, mut call) = messages(None);
        related.send("progress".into()).await.unwrap();
        assert_eq!(call.next().await, Some(Part::Related("progress".into())));
        assert_eq!(call.next().await, None);
    }
}
