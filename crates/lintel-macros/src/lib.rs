//! The lintel stub generator.
//!
//! [`macro@interface`] turns a Rust trait into a door interface: a client that
//! implements the trait over a `lintel::Door`, a server dispatch that serves
//! any implementation of the trait through a door, and stable method
//! numbers. [`macro@Wire`] derives `lintel::stub::Wire` for a user type so it
//! can cross a door. The runtime half, which the generated code calls, is
//! `lintel::stub`; both are re-exported from `lintel` (`lintel::interface`,
//! `lintel::stub::Wire`).
#![forbid(unsafe_code)]

mod interface;
mod wire;

use proc_macro::TokenStream;

/// Make a trait a door interface.
///
/// ```
/// use lintel::stub::{StubError, Wire};
///
/// /// The service's own error, which also carries lintel's failures.
/// #[derive(Debug, PartialEq, Wire)]
/// pub enum KvError {
///     NotFound,
///     Stub(StubError),
/// }
/// impl From<StubError> for KvError {
///     fn from(e: StubError) -> Self {
///         KvError::Stub(e)
///     }
/// }
///
/// #[lintel::interface]
/// pub trait Kv {
///     fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError>;
///     fn get(&self, key: &str, value: &mut Vec<u8>) -> Result<(), KvError>;
///     fn len(&self) -> Result<u64, KvError>;
/// }
///
/// #[derive(Default)]
/// struct Memory(std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>);
/// impl Kv for Memory {
///     fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
///         self.0.lock().unwrap().insert(key.into(), value.into());
///         Ok(())
///     }
///     fn get(&self, key: &str, value: &mut Vec<u8>) -> Result<(), KvError> {
///         let map = self.0.lock().unwrap();
///         value.extend_from_slice(map.get(key).ok_or(KvError::NotFound)?);
///         Ok(())
///     }
///     fn len(&self) -> Result<u64, KvError> {
///         Ok(self.0.lock().unwrap().len() as u64)
///     }
/// }
///
/// // Serve it: a door (to hand to other domains) and a client for it.
/// let door: lintel::Door = KvServer::door(Memory::default());
/// let kv = KvClient::from_door(door);
/// kv.put("a", b"1").unwrap();
/// let mut v = Vec::new();
/// kv.get("a", &mut v).unwrap();
/// assert_eq!(v, b"1");
/// assert_eq!(kv.get("b", &mut v), Err(KvError::NotFound));
/// assert_eq!(kv.len(), Ok(1));
/// ```
///
/// # What it generates
///
/// For `trait Kv`, beside the trait itself:
///
/// - `KvClient`: `Clone`, holds a `lintel::Door`, implements `Kv` (so bring
///   the trait into scope to call it). `KvClient::from_door(door)`,
///   `.door()`, `.into_door()`. Its methods keep the trait's parameter
///   names (a parameter that is a pattern, such as `_` or a tuple, is
///   `arg<i>` there). It implements `lintel::stub::Wire`, so a
///   client is a parameter or result type of other interfaces (the door
///   travels; the receiver gets a typed client).
/// - `KvServer`: serves an `impl Kv + Send + Sync + 'static` (kept in an
///   `Arc<dyn Kv + Send + Sync>`) and implements `lintel::Handler`.
///   `KvServer::new(imp)`, `KvServer::from_arc(arc)`, `.into_door()`,
///   `.into_door_with_unref(f)`, and the shortcuts `KvServer::door(imp)` and
///   `KvServer::serve(imp) -> KvClient`.
/// - `KvClient::INTERFACE`, `KvServer::INTERFACE` (the trait's name) and
///   `KvServer::METHODS` (each method's name and number).
/// - For async code, three more: `KvAsync`, the trait with each method
///   returning a `Send` future of its result (implement it with `async
///   fn`s); `KvAsyncServer<I: KvAsync>`, which serves one through a door
///   with an async handler (`lintel::Door::create_async`: each call a task
///   of a tokio runtime, no server thread waiting while it awaits;
///   `new`, `from_arc`, `into_door`, `into_door_on(handle)`, `door`,
///   `serve`); and `KvAsyncClient`, whose methods are `async fn`s that
///   await the call (`lintel::Door::call_async`). Either client calls
///   either server, co-located or across processes; `KvAsyncClient` is
///   `From<KvClient>` and `From<Door>`.
///
/// # Methods
///
/// Each method takes `&self` (the object behind a door is shared by all
/// its callers: use interior mutability), has no generic parameters, and
/// returns `Result<T, E>` where `T: lintel::stub::Wire` and
/// `E: lintel::stub::ServiceError` (`Wire + From<StubError>`). Parameters:
///
/// | parameter | direction | on the wire |
/// |---|---|---|
/// | `T` where `T: Wire` (integers, `bool`, floats, arrays, tuples, `Option`, `Vec`, `String`, derived types, `lintel::Door`, other interfaces' clients) | in | its encoding; doors in the door list |
/// | `&[u8]`, `&str` | in | length and bytes |
/// | `&mut Vec<u8>` | out: cleared, then filled by the server | length and bytes in the reply; a method's only out buffer (no in-out ones) is its reply's bytes themselves, ahead of the result, its length last: the handler writes where the bytes travel and the caller's vector takes them, no copy on either side |
/// | `#[inout] &mut Vec<u8>` | in and out, length may change | both ways |
/// | `&mut [u8]` | in and out, fixed length | both ways |
///
/// # Method numbers
///
/// A method's number is the 32-bit FNV-1a hash of its name, so adding,
/// removing or reordering methods never renumbers the others; two names
/// that hash alike are a compile error. Calling a method that the server's
/// version lacks fails with `StubError::UnknownMethod`.
///
/// # Placement
///
/// When the door is served by this domain with a `KvServer`, a call runs
/// the implementation directly on the caller's thread (no marshalling),
/// after checking the sizes the remote path would send so that too-large
/// data fails the same way. Otherwise the arguments are encoded into a
/// per-thread buffer and sent with `Door::call` (the fast path when they fit
/// in 16 bytes with no doors, the vanilla path up to 5 KiB, the bulk path
/// beyond, up to the domain's message limit).
///
/// # Buffers by reference
///
/// A by-value parameter marked `#[buffer]` whose type implements
/// `lintel::stub::Passed` (`lintel::Buffer`, `lintel::Sealed`) is passed by
/// reference, not copied: `fn scan(&self, #[buffer] image: lintel::Sealed)
/// -> Result<u64, E>`. A loan travels as a `lintel::Buffer` (the server
/// sees `Buffer::Loaned` across domains, `Buffer::Loan` co-located).
#[proc_macro_attribute]
pub fn interface(attr: TokenStream, item: TokenStream) -> TokenStream {
    interface::expand(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Derive `lintel::stub::Wire` for a struct or enum whose fields are all
/// `Wire`: fields in declaration order; an enum as a one-byte variant
/// index, then the variant's fields.
#[proc_macro_derive(Wire)]
pub fn derive_wire(item: TokenStream) -> TokenStream {
    wire::expand(item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
