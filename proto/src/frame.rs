//! Frames: a 4-byte big-endian length, then that many bytes of MessagePack.
//!
//! The length is checked against the limit before anything is allocated for
//! the body, so a peer that declares a huge frame is cut off having cost only
//! the four bytes it sent. Framing is tokio-util's `LengthDelimitedCodec`;
//! this module adds the MessagePack layer and the errors an operator can read.

use bytes::{Bytes, BytesMut};
use serde::{de::DeserializeOwned, Serialize};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec, LengthDelimitedCodecError};

/// Default upper bound of one frame: room for a dispatch that carries an
/// 8 MiB checkpoint.
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {declared} bytes exceeds the limit of {limit} bytes")]
    TooLarge { declared: usize, limit: usize },
    #[error("malformed message: {0}")]
    Malformed(#[from] rmp_serde::decode::Error),
    #[error("message could not be encoded: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
}

/// A codec that turns frames into messages of type `In` and messages of type
/// `Out` into frames.
pub struct MessageCodec<In, Out> {
    frames: LengthDelimitedCodec,
    limit: usize,
    _types: std::marker::PhantomData<fn(Out) -> In>,
}

impl<In, Out> MessageCodec<In, Out> {
    pub fn new(max_frame: usize) -> Self {
        Self {
            frames: LengthDelimitedCodec::builder()
                .length_field_length(4)
                .max_frame_length(max_frame)
                .new_codec(),
            limit: max_frame,
            _types: std::marker::PhantomData,
        }
    }
}

/// Decodes one message from a frame's body.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    Ok(rmp_serde::from_slice(body)?)
}

/// Encodes one message as a frame body (MessagePack with field names, so that
/// fields can be added without breaking older peers).
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    Ok(rmp_serde::to_vec_named(message)?)
}

impl<In: DeserializeOwned, Out> Decoder for MessageCodec<In, Out> {
    type Item = In;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, FrameError> {
        match self.frames.decode(src) {
            Ok(Some(body)) => decode(&body).map(Some),
            Ok(None) => Ok(None),
            // The codec refuses an oversized length before reserving room for
            // it, leaving the length field unread in `src`.
            Err(e)
                if e.get_ref()
                    .is_some_and(|inner| inner.is::<LengthDelimitedCodecError>()) =>
            {
                let declared = src
                    .get(..4)
                    .map(|h| u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize)
                    .unwrap_or(0);
                Err(FrameError::TooLarge {
                    declared,
                    limit: self.limit,
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl<In, Out: Serialize> Encoder<Out> for MessageCodec<In, Out> {
    type Error = FrameError;

    fn encode(&mut self, item: Out, dst: &mut BytesMut) -> Result<(), FrameError> {
        let body = encode(&item)?;
        if body.len() > self.limit {
            return Err(FrameError::TooLarge {
                declared: body.len(),
                limit: self.limit,
            });
        }
        self.frames.encode(Bytes::from(body), dst)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{HostMessage, MasterMessage, RunningAttempt};
    use crate::AttemptRef;
    use proptest::prelude::*;

    type MasterSide = MessageCodec<HostMessage, MasterMessage>;
    type HostSide = MessageCodec<MasterMessage, HostMessage>;

    fn heartbeat() -> HostMessage {
        HostMessage::Heartbeat {
            running: vec![RunningAttempt {
                attempt: AttemptRef::new(7, 2),
                slot: 0,
                leased: true,
                assignment: Default::default(),
            }],
            environments: vec![],
        }
    }

    #[test]
    fn a_message_survives_a_round_trip() {
        let mut buf = BytesMut::new();
        HostSide::new(1024).encode(heartbeat(), &mut buf).unwrap();
        let got = MasterSide::new(1024).decode(&mut buf).unwrap();
        assert_eq!(got, Some(heartbeat()));
        assert!(buf.is_empty());
    }

    #[test]
    fn a_declared_length_over_the_limit_is_refused_before_the_body_arrives() {
        let mut buf = BytesMut::from(&u32::to_be_bytes(1 << 30)[..]);
        let err = MasterSide::new(1024).decode(&mut buf).unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { declared, limit: 1024 } if declared == 1 << 30)
        );
        // Nothing was reserved for the announced gigabyte.
        assert!(buf.capacity() < 1024);
    }

    #[test]
    fn a_partial_frame_waits_for_more_bytes() {
        let mut full = BytesMut::new();
        HostSide::new(1024).encode(heartbeat(), &mut full).unwrap();
        let mut codec = MasterSide::new(1024);
        let mut part = BytesMut::from(&full[..full.len() - 1]);
        assert_eq!(codec.decode(&mut part).unwrap(), None);
        part.extend_from_slice(&full[full.len() - 1..]);
        assert_eq!(codec.decode(&mut part).unwrap(), Some(heartbeat()));
    }

    #[test]
    fn garbage_in_a_frame_is_a_malformed_message() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&4u32.to_be_bytes());
        buf.extend_from_slice(&[0xc1, 0xff, 0x00, 0x13]);
        let err = MasterSide::new(1024).decode(&mut buf).unwrap_err();
        assert!(matches!(err, FrameError::Malformed(_)), "{err}");
    }

    #[test]
    fn an_unknown_message_kind_is_malformed() {
        let body =
            rmp_serde::to_vec_named(&serde_json::json!({"Teleport": {"to": "mars"}})).unwrap();
        let err = decode::<HostMessage>(&body).unwrap_err();
        assert!(matches!(err, FrameError::Malformed(_)), "{err}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut codec = MasterSide::new(256);
            let mut buf = BytesMut::from(&bytes[..]);
            // Decode until the codec asks for more bytes or fails.
            while let Ok(Some(_)) = codec.decode(&mut buf) {}
        }

        #[test]
        fn mutated_valid_frames_never_panic_the_decoder(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)
        ) {
            let mut buf = BytesMut::new();
            HostSide::new(4096).encode(heartbeat(), &mut buf).unwrap();
            let mut bytes = buf.to_vec();
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            let mut codec = MasterSide::new(4096);
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = codec.decode(&mut buf) {}
        }
    }
}
