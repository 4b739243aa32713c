//! The frame decoder under hostile input, with every allocation counted: it
//! never panics, and it never allocates more than the frame limit, however
//! large the lengths declared in the frame header or inside the MessagePack
//! body.

use bytes::BytesMut;
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tokio_util::codec::{Decoder, Encoder};
use trainyard_proto::frame::MessageCodec;
use trainyard_proto::messages::{HostMessage, MasterMessage, RunningAttempt};
use trainyard_proto::AttemptRef;

/// Records the largest single allocation of each thread, so tests running
/// in parallel do not see each other's.
struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const LIMIT: usize = 4 << 20;

/// Decodes `bytes` until the codec wants more or fails; returns the largest
/// allocation made meanwhile.
fn largest_allocation_decoding(bytes: &[u8]) -> usize {
    let mut codec = MessageCodec::<HostMessage, MasterMessage>::new(LIMIT);
    let mut buf = BytesMut::from(bytes);
    LARGEST.with(|l| l.set(0));
    while let Ok(Some(_)) = codec.decode(&mut buf) {}
    LARGEST.with(|l| l.get())
}

fn valid_frame() -> Vec<u8> {
    let mut buf = BytesMut::new();
    let running = (0..8)
        .map(|i| RunningAttempt {
            attempt: AttemptRef::new(i, 1),
            slot: i as u32,
            leased: true,
            assignment: Default::default(),
        })
        .collect();
    MessageCodec::<MasterMessage, HostMessage>::new(LIMIT)
        .encode(
            HostMessage::Heartbeat {
                running,
                environments: vec![],
            },
            &mut buf,
        )
        .unwrap();
    buf.to_vec()
}

#[test]
fn a_frame_declaring_gigabytes_allocates_nothing_of_the_kind() {
    let mut frame = u32::MAX.to_be_bytes().to_vec();
    frame.extend_from_slice(&[0x91, 0xdd, 0xff, 0xff, 0xff, 0xff]);
    assert!(largest_allocation_decoding(&frame) < 64 * 1024);
}

#[test]
fn an_array_declaring_billions_of_elements_inside_a_small_frame_is_bounded() {
    // {"Heartbeat": {"running": array32(0xffffffff) ...}} in 30 bytes.
    let mut body = vec![0x81, 0xa9];
    body.extend_from_slice(b"Heartbeat");
    body.extend_from_slice(&[0x81, 0xa7]);
    body.extend_from_slice(b"running");
    body.extend_from_slice(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    assert!(largest_allocation_decoding(&frame) <= LIMIT);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_bytes_stay_within_the_limit(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        prop_assert!(largest_allocation_decoding(&bytes) <= LIMIT);
    }

    #[test]
    fn mutated_frames_stay_within_the_limit(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12)
    ) {
        let mut bytes = valid_frame();
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        prop_assert!(largest_allocation_decoding(&bytes) <= LIMIT);
    }
}
