//! Secrets for s3s's signature checks, looked up in the cluster through a small bounded cache.

use std::time::Duration;

use s3s::S3Result;
use s3s::auth::{S3Auth, SecretKey};
use shoal_client::Client;

use crate::cache::TtlCache;
use crate::error::GatewayError;
use crate::layout::KeyRecord;
use crate::meta;

/// How long a looked-up key is trusted: a removed key stops working within this time.
const KEY_TTL: Duration = Duration::from_secs(10);
/// Most keys cached (a lookup is one cluster read).
const MAX_CACHED_KEYS: usize = 10_000;

pub struct KeyCache {
    client: Client,
    keys: TtlCache<KeyRecord>,
}

impl KeyCache {
    pub fn new(client: Client) -> KeyCache {
        KeyCache { client, keys: TtlCache::new(KEY_TTL, MAX_CACHED_KEYS) }
    }

    pub async fn get(&self, access: &str) -> Result<KeyRecord, GatewayError> {
        if let Some(rec) = self.keys.get(access) {
            return Ok(rec);
        }
        let rec = meta::lookup_key(&self.client, access).await?;
        self.keys.put(access, rec.clone());
        Ok(rec)
    }
}

/// The gateway's [`S3Auth`]: secrets from the cluster.
pub struct ClusterAuth(pub std::sync::Arc<KeyCache>);

#[async_trait::async_trait]
impl S3Auth for ClusterAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.get(access_key).await {
            Ok(rec) => Ok(SecretKey::from(rec.secret)),
            Err(GatewayError::NoSuchAccessKey(_)) => {
                Err(s3s::s3_error!(InvalidAccessKeyId, "the access key does not exist"))
            }
            Err(e) => Err(e.into()),
        }
    }
}
