//! A response body already in hand, kept as the pieces it was made of.
//!
//! Joining pieces into one buffer copies them: for an SSE answer gathered
//! behind its priming event (`one_write.rs`), or a 1,000-tool list put
//! between its JSON-RPC envelope's head and tail (`downstream/prebuilt.rs`),
//! that is a copy of a few hundred kilobytes per answer. [`WholeBody`]
//! keeps the pieces; its exact size gives the response a `Content-Length`,
//! and hyper writes the head and every piece in one go.

use std::{
    collections::VecDeque,
    pin::Pin,
    task::{Context, Poll},
};

use axum::body::Bytes;

/// A body of known pieces, sent in order.
#[derive(Default)]
pub struct WholeBody {
    frames: VecDeque<Bytes>,
    len: u64,
}

impl WholeBody {
    pub fn push(&mut self, data: Bytes) {
        self.len += data.len() as u64;
        self.frames.push_back(data);
    }

    /// The pieces, in order (for a body that turns out not to be whole).
    pub fn into_frames(self) -> VecDeque<Bytes> {
        self.frames
    }
}

impl FromIterator<Bytes> for WholeBody {
    fn from_iter<I: IntoIterator<Item = Bytes>>(pieces: I) -> Self {
        let mut body = WholeBody::default();
        for piece in pieces {
            body.push(piece);
        }
        body
    }
}

impl http_body::Body for WholeBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.frames.pop_front();
        if let Some(data) = &next {
            self.len -= data.len() as u64;
        }
        Poll::Ready(next.map(|data| Ok(http_body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests {
    use http_body::Body as _;

    use super::*;

    #[tokio::test]
    async fn pieces_go_out_in_order_with_their_exact_length() {
        let body: WholeBody = ["{\"id\":", "7", "}"]
            .into_iter()
            .map(|piece| Bytes::from_static(piece.as_bytes()))
            .collect();
        assert_eq!(body.size_hint().exact(), Some(8));
        let whole = axum::body::to_bytes(axum::body::Body::new(body), 64)
            .await
            .unwrap();
        assert_eq!(&whole[..], b"{\"id\":7}");
    }
}
