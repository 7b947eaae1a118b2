//! The gRPC baseline of suite `net`: the same echo served and called with tonic (HTTP/2,
//! protobuf: one `bytes` field each way), no lintel. The service is written out by hand, as
//! tonic's code generator would write it, so that the build needs no `protoc`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use tonic::codegen::{BoxFuture, Service, http};
use tonic_prost::ProstCodec;

/// The message each way.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Blob {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
}

const SERVICE: &str = "lintel.bench.Echo";
const PATH: &str = "/lintel.bench.Echo/Echo";

/// The server: answers `Echo` with the request's bytes.
#[derive(Clone)]
struct EchoService;

impl tonic::server::NamedService for EchoService {
    const NAME: &'static str = SERVICE;
}

/// The one method.
struct Echo;

impl Service<tonic::Request<Blob>> for Echo {
    type Response = tonic::Response<Blob>;
    type Error = tonic::Status;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: tonic::Request<Blob>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(req.into_inner())))
    }
}

impl Service<http::Request<tonic::body::Body>> for EchoService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            if req.uri().path() != PATH {
                return Ok(tonic::Status::unimplemented(req.uri().path().to_string()).into_http());
            }
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Blob, Blob>::default())
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX);
            Ok(grpc.unary(Echo, req).await)
        })
    }
}

/// Serve the echo on `listener` until the process ends (on a current-thread runtime).
pub fn serve(listener: std::net::TcpListener) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let incoming =
            tonic::transport::server::TcpIncoming::from(tokio::net::TcpListener::from_std(listener)?)
                .with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(EchoService)
            .serve_with_incoming(incoming)
            .await?;
        anyhow::Ok(())
    })
}

/// A client of the echo, with the runtime that drives it.
pub struct Client {
    rt: tokio::runtime::Runtime,
    grpc: tonic::client::Grpc<tonic::transport::Channel>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let channel = rt.block_on(
            tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect(),
        )?;
        let grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(Client { rt, grpc })
    }

    /// `iters` echoes of `data` in batches of `batch`.
    pub fn measure(&self, data: &[u8], iters: u64, batch: u64) -> anyhow::Result<crate::harness::Stats> {
        let grpc = &self.grpc;
        self.rt.block_on(async {
            crate::awaited::measure_awaited(iters, batch, |_| {
                // A clone shares the connection (as tonic's generated clients do).
                let mut g = grpc.clone();
                async move {
                    g.ready().await?;
                    let r = g
                        .unary(
                            tonic::Request::new(Blob { data: data.to_vec() }),
                            http::uri::PathAndQuery::from_static(PATH),
                            ProstCodec::<Blob, Blob>::default(),
                        )
                        .await?;
                    anyhow::ensure!(r.get_ref().data.len() == data.len(), "gRPC echoed other bytes");
                    Ok(())
                }
            })
            .await
        })
    }
}
