//! The agent's accept loop with a cap on live connections: a controller needs one or two, so a
//! client that opens hundreds (by mistake or not) gets the extra ones closed at once instead
//! of tying up the agent's memory and file descriptors while a trial measures.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// A connection that gives its slot back when it closes.
pub struct Counted {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl Connected for Counted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Accepted connections, at most `max` alive at once; one over is closed as it arrives.
pub struct CappedIncoming {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    max: usize,
}

impl CappedIncoming {
    /// Accepts from `listener`, keeping at most `max` connections.
    pub fn new(listener: TcpListener, max: usize) -> Self {
        Self {
            listener,
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }
}

impl Stream for CappedIncoming {
    type Item = io::Result<Counted>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let (stream, from) = match this.listener.poll_accept(cx) {
                Poll::Ready(Ok(accepted)) => accepted,
                // A failed accept (e.g. out of file descriptors) is not the end of serving.
                Poll::Ready(Err(err)) => {
                    tracing::warn!("accept failed: {err}");
                    continue;
                }
                Poll::Pending => return Poll::Pending,
            };
            match Arc::clone(&this.slots).try_acquire_owned() {
                Ok(slot) => {
                    return Poll::Ready(Some(Ok(Counted {
                        stream,
                        _slot: slot,
                    })));
                }
                Err(_) => {
                    tracing::warn!(
                        "closing a connection from {from}: {} connections are open already",
                        this.max
                    );
                    drop(stream);
                }
            }
        }
    }
}
