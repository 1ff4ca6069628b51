//! `shoal nbd serve POOL/IMAGE...`: block images over NBD, in the foreground (a service manager
//! runs it). Export names are `POOL/IMAGE`; the first image is also the default export.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use shoal_nbd::{BlockDevice, DeviceError, Export, Exports, Extent, Limits};
use shoal_rbd::{Image, RbdError};

use crate::conf::ConfArgs;

#[derive(Subcommand)]
pub enum NbdCommand {
    /// Serve images over NBD until SIGTERM or SIGINT.
    Serve(ServeArgs),
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    conf: ConfArgs,
    /// Images to export, as POOL/IMAGE.
    #[arg(required = true)]
    images: Vec<String>,
    /// TCP address to listen on.
    #[arg(long, conflicts_with = "socket")]
    listen: Option<std::net::SocketAddr>,
    /// Unix socket to listen on (removed first if it is a stale socket).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Export every image read-only.
    #[arg(long)]
    read_only: bool,
    /// How long a request waits for an unavailable cluster (a PG peering, an OSD down) before
    /// failing with EIO.
    #[arg(long, default_value_t = 600)]
    io_wait_s: u64,
}

pub fn run(cmd: &NbdCommand) -> Result<ExitCode> {
    match cmd {
        NbdCommand::Serve(args) => serve(args),
    }
}

/// A block image as an NBD device.
struct ImageDevice(Image);

fn device_error(e: RbdError) -> DeviceError {
    DeviceError { errno: e.errno(), message: e.to_string() }
}

impl BlockDevice for ImageDevice {
    fn size_bytes(&self) -> u64 {
        self.0.size_bytes()
    }
    fn read_only(&self) -> bool {
        self.0.is_read_only()
    }
    async fn read(&self, offset: u64, len_bytes: u32) -> Result<Vec<u8>, DeviceError> {
        self.0.read(offset, u64::from(len_bytes)).await.map_err(device_error)
    }
    async fn write(&self, offset: u64, data: Vec<u8>) -> Result<(), DeviceError> {
        self.0.write(offset, &data).await.map_err(device_error)
    }
    async fn zero(&self, offset: u64, len_bytes: u64) -> Result<(), DeviceError> {
        self.0.zero(offset, len_bytes).await.map_err(device_error)
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        self.0.flush().await.map_err(device_error)
    }
    async fn allocation(&self, offset: u64, len_bytes: u64) -> Result<Vec<Extent>, DeviceError> {
        let runs = self.0.allocation(offset, len_bytes).await.map_err(device_error)?;
        Ok(runs.into_iter().map(|r| Extent { offset: r.offset, len_bytes: r.len_bytes, hole: !r.allocated }).collect())
    }
}

fn serve(args: &ServeArgs) -> Result<ExitCode> {
    crate::daemons::init_logging();
    let cluster = args.conf.cluster()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    rt.block_on(async {
        let client = shoal_client::Client::connect(cluster).await.context("connecting to the cluster")?;
        let mut exports = Vec::new();
        for spec in &args.images {
            if spec.contains('@') {
                bail!("{spec}: snapshots cannot be exported yet (images have no snapshots yet)");
            }
            let (pool, name) = crate::rbd_cmd::parse_spec(spec)?;
            let image = Image::open(&client, pool, name, args.read_only)
                .await
                .with_context(|| format!("opening {spec}"))?
                .with_wait_ms(args.io_wait_s.saturating_mul(1000));
            let description = format!("shoal image {spec} ({} bytes)", image.size_bytes());
            exports.push(Export { name: spec.clone(), description, device: Arc::new(ImageDevice(image)) });
        }
        let exports = Arc::new(Exports { exports, limits: Limits::default() });
        let first = args.images[0].clone();
        match &args.socket {
            Some(path) => {
                if path.exists() {
                    // Only a socket nobody answers on is replaced.
                    if std::os::unix::net::UnixStream::connect(path).is_ok() {
                        bail!("{} is in use by another server", path.display());
                    }
                    std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
                }
                let listener =
                    tokio::net::UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
                tracing::info!(uri = %format!("nbd+unix:///{first}?socket={}", path.display()), "NBD server serving");
                let accept = async {
                    loop {
                        let (stream, _) = listener.accept().await?;
                        tokio::spawn(shoal_nbd::serve_connection(exports.clone(), stream, "unix".to_string()));
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), std::io::Error>(())
                };
                tokio::select! {
                    r = accept => r.context("accepting")?,
                    () = crate::daemons::stop_signal() => tracing::info!("stopping on a signal"),
                }
                let _ = std::fs::remove_file(path);
            }
            None => {
                let addr = args.listen.unwrap_or_else(|| "127.0.0.1:10809".parse().expect("a valid address"));
                let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
                let local = listener.local_addr()?;
                tracing::info!(uri = %format!("nbd://{local}/{first}"), "NBD server serving");
                let accept = async {
                    loop {
                        let (stream, peer) = listener.accept().await?;
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(shoal_nbd::serve_connection(exports.clone(), stream, peer.to_string()));
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), std::io::Error>(())
                };
                tokio::select! {
                    r = accept => r.context("accepting")?,
                    () = crate::daemons::stop_signal() => tracing::info!("stopping on a signal"),
                }
            }
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}
