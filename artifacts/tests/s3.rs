//! The S3 backend against a real S3-protocol server (`s3s-fs`, which `make
//! s3-server` installs): objects written in parts read back whole and by
//! range with their checksum; an upload cut short leaves no object; a
//! wrong secret key or an unknown key id is refused with the store named.
//! (`s3s-fs` makes a missing bucket as it writes, so that refusal, which
//! takes the same path, is not tried here.)

use bytes::Bytes;
use futures::StreamExt;
use trainyard_artifacts::s3::DEFAULT_REGION;
use trainyard_artifacts::store::PART_BYTES;
use trainyard_artifacts::{ArtifactStore, Digest, PutError, S3Credentials, S3Location};
use trainyard_testkit::S3Server;

fn location(server: &S3Server, bucket: &str) -> S3Location {
    S3Location {
        bucket: bucket.into(),
        prefix: "c1".into(),
        endpoint: Some(server.endpoint()),
        region: DEFAULT_REGION.into(),
        allow_http: true,
    }
}

fn keys(server: &S3Server) -> S3Credentials {
    S3Credentials {
        access_key_id: server.access_key_id.clone(),
        secret_access_key: server.secret_access_key.clone(),
        session_token: None,
        source: "the test",
    }
}

fn chunks(data: &[u8]) -> impl futures::Stream<Item = Result<Bytes, String>> + Unpin {
    let parts: Vec<Result<Bytes, String>> = data
        .chunks(1 << 20)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures::stream::iter(parts)
}

async fn read_all(
    store: &ArtifactStore,
    key: &str,
    range: Option<std::ops::Range<u64>>,
) -> Vec<u8> {
    let mut read = store.read(key, range).await.unwrap();
    let mut out = vec![];
    while let Some(chunk) = read.bytes.next().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    out
}

#[tokio::test]
async fn an_object_written_in_parts_reads_back_whole_and_by_range_with_its_checksum() {
    let server = S3Server::start();
    server.create_bucket("ty-unit");
    let store = ArtifactStore::s3(&location(&server, "ty-unit"), &keys(&server)).unwrap();
    let data: Vec<u8> = (0..(PART_BYTES * 2 + 12345))
        .map(|i| (i % 251) as u8)
        .collect();
    let key = "tasks/1/1/checkpoint/00/ckpt/model one.bin";
    let written = store
        .put_stream(key, chunks(&data), u64::MAX)
        .await
        .unwrap();
    let mut digest = Digest::new();
    digest.update(&data);
    assert_eq!(written.size, data.len() as u64);
    assert_eq!(written.sha256, digest.hex());
    assert_eq!(store.size_of(key).await.unwrap(), Some(data.len() as u64));
    assert_eq!(read_all(&store, key, None).await, data);
    assert_eq!(
        read_all(
            &store,
            key,
            Some(PART_BYTES as u64 - 5..PART_BYTES as u64 + 5)
        )
        .await,
        data[PART_BYTES - 5..PART_BYTES + 5]
    );
    assert_eq!(
        store.list("tasks").await.unwrap(),
        [(key.to_string(), data.len() as u64)]
    );
    assert!(
        server.objects().join("ty-unit/c1").join(key).is_file(),
        "the object is under the prefix in the bucket"
    );
    store.delete(key).await.unwrap();
    assert_eq!(store.size_of(key).await.unwrap(), None);
}

#[tokio::test]
async fn an_upload_cut_short_or_over_its_limit_leaves_no_object() {
    let server = S3Server::start();
    server.create_bucket("ty-unit");
    let store = ArtifactStore::s3(&location(&server, "ty-unit"), &keys(&server)).unwrap();
    let first_part = vec![7u8; PART_BYTES + 1];
    let cut = chunks(&first_part).chain(futures::stream::iter(vec![Err(
        "connection reset".to_string()
    )]));
    let cut = store
        .put_stream("tasks/1/1/checkpoint/00/cut", cut, u64::MAX)
        .await;
    assert!(matches!(cut, Err(PutError::Source(_))), "{cut:?}");
    let over = store
        .put_stream("tasks/1/1/checkpoint/00/over", chunks(&first_part), 1 << 20)
        .await;
    assert!(matches!(over, Err(PutError::TooLarge { .. })), "{over:?}");
    assert!(
        store.list("tasks").await.unwrap().is_empty(),
        "no object appeared"
    );
}

#[tokio::test]
async fn wrong_keys_are_refused_naming_the_store() {
    let server = S3Server::start();
    server.create_bucket("ty-unit");
    let mut wrong = keys(&server);
    wrong.secret_access_key = "not-the-secret".into();
    let store = ArtifactStore::s3(&location(&server, "ty-unit"), &wrong).unwrap();
    let refused = store
        .put_stream("tasks/1/k", chunks(b"abc"), u64::MAX)
        .await
        .unwrap_err();
    assert!(!refused.unreachable(), "{refused}");
    assert!(
        refused
            .to_string()
            .contains("the artifact store s3://ty-unit/c1 refused the object"),
        "{refused}"
    );
    let mut unknown = keys(&server);
    unknown.access_key_id = "NOBODY".into();
    let stranger = ArtifactStore::s3(&location(&server, "ty-unit"), &unknown).unwrap();
    let refused = stranger
        .put_stream("tasks/1/k", chunks(b"abc"), u64::MAX)
        .await
        .unwrap_err();
    assert!(!refused.unreachable(), "{refused}");
    assert!(refused.to_string().contains("s3://ty-unit/c1"), "{refused}");
    assert!(stranger.list("tasks").await.is_err(), "nor can it list");
    let store = ArtifactStore::s3(&location(&server, "ty-unit"), &keys(&server)).unwrap();
    assert!(
        store.list("tasks").await.unwrap().is_empty(),
        "nothing was written"
    );
}

/// A server nobody answers at is out of reach, not refusing: the host
/// then reports its attempt's result without the artifacts rather than
/// blaming itself.
#[tokio::test]
async fn a_server_nobody_answers_at_is_unreachable_not_refusing() {
    let server = S3Server::start();
    let mut nowhere = location(&server, "ty-unit");
    nowhere.endpoint = Some(format!(
        "http://127.0.0.1:{}",
        trainyard_testkit::free_port()
    ));
    let store = ArtifactStore::s3(&nowhere, &keys(&server)).unwrap();
    let failed = store
        .put_stream("tasks/1/k", chunks(b"abc"), u64::MAX)
        .await
        .unwrap_err();
    assert!(failed.unreachable(), "{failed}");
}
