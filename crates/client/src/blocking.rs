//! A synchronous facade over [`Client`] for programs without an async runtime (the CLI).

use shoal_proto::osd::{ObjOp, OpOutput};

use crate::config::ClusterConfig;
use crate::error::ClientError;
use crate::objecter::{Client, ListCursor, OpResult};

/// A [`Client`] with its own runtime; every call blocks until the operation completes.
pub struct BlockingClient {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl BlockingClient {
    pub fn connect(cfg: ClusterConfig) -> Result<BlockingClient, ClientError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| ClientError::Net(shoal_net::NetError::Io(e)))?;
        let client = runtime.block_on(Client::connect(cfg))?;
        Ok(BlockingClient { runtime, client })
    }

    /// The async client, for code that wants to run many operations at once on this runtime.
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    pub fn op(&self, pool: &str, object: &str, ops: Vec<ObjOp>, data: Vec<u8>) -> Result<OpResult, ClientError> {
        self.runtime.block_on(self.client.op(pool, object, ops, data))
    }

    /// Replaces the object's contents with `data` (creating it). Durable on every acting
    /// replica when it returns.
    pub fn write_full(&self, pool: &str, object: &str, data: Vec<u8>) -> Result<(), ClientError> {
        let len_bytes = data.len() as u64;
        self.op(pool, object, vec![ObjOp::WriteFull { len_bytes }], data).map(|_| ())
    }

    /// The whole object.
    pub fn read(&self, pool: &str, object: &str) -> Result<Vec<u8>, ClientError> {
        Ok(self.op(pool, object, vec![ObjOp::Read { offset: 0, len_bytes: u64::MAX }], Vec::new())?.data)
    }

    /// Size in bytes and modification time in nanoseconds since the epoch.
    pub fn stat(&self, pool: &str, object: &str) -> Result<(u64, i64), ClientError> {
        let result = self.op(pool, object, vec![ObjOp::Stat], Vec::new())?;
        match result.outputs.first() {
            Some(OpOutput::Stat { size_bytes, mtime_ns }) => Ok((*size_bytes, *mtime_ns)),
            other => Err(ClientError::BadReply(format!("stat answered {other:?}"))),
        }
    }

    pub fn remove(&self, pool: &str, object: &str) -> Result<(), ClientError> {
        self.op(pool, object, vec![ObjOp::Remove], Vec::new()).map(|_| ())
    }

    pub fn list(
        &self,
        pool: &str,
        cursor: Option<ListCursor>,
        max: u32,
    ) -> Result<(Vec<String>, Option<ListCursor>), ClientError> {
        self.runtime.block_on(self.client.list(pool, cursor, max))
    }
}
