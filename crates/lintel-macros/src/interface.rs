//! `#[interface]`: check the trait, then generate its client, its server
//! dispatch and its method numbers. Every check names the offending token
//! and says how to fix it; the generated code then only calls
//! `lintel::stub`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{
    FnArg, GenericArgument, Ident, ItemTrait, Pat, PathArguments, ReturnType, TraitItem, TraitItemFn, Type,
};

/// How one parameter crosses the door.
enum Kind {
    /// By value, `T: Wire`.
    Value(Box<Type>),
    /// `&[u8]`, in.
    Bytes,
    /// `&str`, in.
    Str,
    /// `&mut Vec<u8>`, out.
    Out,
    /// `#[inout] &mut Vec<u8>`.
    InOutVec,
    /// `&mut [u8]`, in and out, fixed length.
    InOutSlice,
    /// `#[buffer] T` (`T: lintel::stub::Passed`): passed by reference, not
    /// copied (a sealed snapshot or a loan).
    Buffer(Box<Type>),
}

struct Method {
    name: Ident,
    number: u32,
    params: Vec<Kind>,
    /// Each parameter's name in the generated code: the trait's own when it
    /// is a plain name (`key`, `mut key`), else `arg<i>` (for `_` or a
    /// tuple pattern).
    args: Vec<Ident>,
    ok: Type,
    err: Type,
}

fn err<T>(span: impl Spanned, msg: &str) -> syn::Result<T> {
    Err(syn::Error::new(span.span(), msg))
}

/// FNV-1a, 32 bits (the same as `lintel::stub::method_number`).
fn fnv1a(s: &str) -> u32 {
    s.bytes()
        .fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

pub fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let mut tr: ItemTrait = syn::parse2(item)?;
    let mut errors: Option<syn::Error> = check_trait(&tr).err();
    if !attr.is_empty() {
        let e = syn::Error::new_spanned(
            attr,
            "#[lintel::interface] takes no arguments: write `#[lintel::interface]`",
        );
        combine(&mut errors, e);
    }
    let mut methods: Vec<Method> = Vec::new();
    for it in &mut tr.items {
        let res = match it {
            TraitItem::Fn(f) => method(f),
            other => err(
                &*other,
                "an interface holds only methods: move associated types and constants out of the trait",
            ),
        };
        match res {
            Ok(m) => {
                if let Some(prev) = methods.iter().find(|p| p.number == m.number) {
                    let e = syn::Error::new(
                        m.name.span(),
                        format!(
                            "method number collision: `{}` and `{}` hash to the same number ({:#010x}); rename one of them",
                            prev.name, m.name, m.number
                        ),
                    );
                    combine(&mut errors, e);
                }
                methods.push(m);
            }
            Err(e) => combine(&mut errors, e),
        }
    }
    if let Some(e) = errors {
        // Keep the trait itself so that code using it reports no errors of
        // its own on top of these.
        let e = e.to_compile_error();
        return Ok(quote!(#tr #e));
    }
    Ok(generate(&tr, &methods))
}

fn combine(acc: &mut Option<syn::Error>, e: syn::Error) {
    match acc {
        Some(a) => a.combine(e),
        None => *acc = Some(e),
    }
}

fn check_trait(tr: &ItemTrait) -> syn::Result<()> {
    if let Some(u) = &tr.unsafety {
        return err(u, "an interface cannot be an unsafe trait: remove `unsafe`");
    }
    if let Some(a) = &tr.auto_token {
        return err(a, "an interface cannot be an auto trait: remove `auto`");
    }
    if !tr.generics.params.is_empty() {
        return err(
            &tr.generics,
            "an interface cannot be generic: both sides of a door must agree on one set of types; remove the generic parameters",
        );
    }
    if let Some(w) = &tr.generics.where_clause {
        return err(w, "an interface cannot have a where clause: remove it");
    }
    if !tr.supertraits.is_empty() {
        return err(
            &tr.supertraits,
            "an interface cannot have supertraits: remove them (the server already requires `Send + Sync + 'static`)",
        );
    }
    Ok(())
}

fn method(f: &mut TraitItemFn) -> syn::Result<Method> {
    let sig = &mut f.sig;
    if let Some(t) = &sig.constness {
        return err(t, "an interface method cannot be `const`: remove it");
    }
    if let Some(t) = &sig.asyncness {
        return err(
            t,
            "an interface method cannot be `async`: door calls are synchronous; remove `async`",
        );
    }
    if let Some(t) = &sig.unsafety {
        return err(t, "an interface method cannot be `unsafe`: remove it");
    }
    if let Some(t) = &sig.abi {
        return err(t, "an interface method cannot have an ABI: remove the `extern`");
    }
    if let Some(t) = &sig.variadic {
        return err(t, "an interface method cannot be variadic");
    }
    if !sig.generics.params.is_empty() {
        return err(
            &sig.generics,
            "an interface method cannot be generic: the server must know every type when it decodes a call; use concrete types (elided lifetimes like `&[u8]` are fine)",
        );
    }
    if let Some(w) = &sig.generics.where_clause {
        return err(w, "an interface method cannot have a where clause: remove it");
    }

    // The receiver: exactly `&self`.
    match sig.inputs.first() {
        Some(FnArg::Receiver(r)) => {
            if r.reference.is_none() || r.colon_token.is_some() {
                return err(
                    r,
                    "an interface method takes `&self`: the object behind a door stays with its server",
                );
            }
            if let Some(m) = &r.mutability {
                return err(
                    m,
                    "an interface method takes `&self`, not `&mut self`: a door's object is shared by all its callers at once; use interior mutability (a Mutex or atomics) in the implementation",
                );
            }
        }
        _ => {
            return err(
                &sig.ident,
                "an interface method needs a `&self` receiver: write `fn name(&self, ...)`",
            );
        }
    }

    let mut params = Vec::new();
    let mut args = Vec::new();
    for (i, arg) in sig.inputs.iter_mut().skip(1).enumerate() {
        let FnArg::Typed(pt) = arg else {
            return err(&*arg, "only the first parameter can be `self`");
        };
        args.push(arg_name(&pt.pat, i));
        let (mut inout, mut buffer) = (None, None);
        pt.attrs.retain(|a| {
            if a.path().is_ident("inout") {
                inout = Some(a.clone());
                false
            } else if a.path().is_ident("buffer") {
                buffer = Some(a.clone());
                false
            } else {
                true
            }
        });
        let kind = param_kind(&pt.ty)?;
        let kind = match (inout, buffer, kind) {
            (None, None, k) => k,
            (Some(_), None, Kind::Out) => Kind::InOutVec,
            (Some(a), None, _) => {
                return err(
                    a,
                    "`#[inout]` applies only to a `&mut Vec<u8>` parameter (a `&mut [u8]` is always in-out)",
                );
            }
            (None, Some(_), Kind::Value(t)) => Kind::Buffer(t),
            (_, Some(a), _) => {
                return err(
                    a,
                    "`#[buffer]` applies only to a parameter passed by value whose type implements `lintel::stub::Passed` (`lintel::Buffer`, `lintel::Sealed` or `std::os::fd::OwnedFd`)",
                );
            }
        };
        params.push(kind);
    }
    if params.iter().filter(|k| matches!(k, Kind::Buffer(_))).count() > 16 {
        return err(&sig.ident, "a method passes at most 16 `#[buffer]` parameters");
    }

    let (ok, e) = result_types(&sig.output, &sig.ident)?;
    let name = sig.ident.clone();
    Ok(Method {
        number: fnv1a(&name.to_string()),
        name,
        params,
        args,
        ok,
        err: e,
    })
}

/// The name a parameter has in the generated methods: the trait's own when
/// its pattern is a plain name (without its `mut` or `ref`, which would
/// only warn there), so rustdoc and IDEs show it; `arg<i>` otherwise. The
/// generated code's own locals are hygienic (`Span::mixed_site`), so no
/// name the user picks can clash with them.
fn arg_name(pat: &Pat, i: usize) -> Ident {
    match pat {
        Pat::Ident(p) if p.subpat.is_none() => p.ident.clone(),
        _ => Ident::new(&format!("arg{i}"), Span::mixed_site()),
    }
}

const UNSUPPORTED_REF: &str = "unsupported parameter type: a borrowed parameter must be `&[u8]` or `&str` (in), `&mut Vec<u8>` (out, or in-out with `#[inout]`) or `&mut [u8]` (in-out); pass anything else by value as a type that implements `lintel::stub::Wire`";

fn param_kind(ty: &Type) -> syn::Result<Kind> {
    match ty {
        Type::Reference(r) => {
            if let Some(l) = &r.lifetime
                && l.ident != "_"
            {
                return err(
                    l,
                    "remove the named lifetime: interface methods use elided lifetimes only",
                );
            }
            let elem = &*r.elem;
            match (r.mutability.is_some(), elem) {
                (false, Type::Slice(s)) if is_ident(&s.elem, "u8") => Ok(Kind::Bytes),
                (false, e) if is_ident(e, "str") => Ok(Kind::Str),
                (true, Type::Slice(s)) if is_ident(&s.elem, "u8") => Ok(Kind::InOutSlice),
                (true, e) if is_vec_u8(e) => Ok(Kind::Out),
                _ => err(ty, UNSUPPORTED_REF),
            }
        }
        Type::ImplTrait(_) => err(
            ty,
            "an interface method cannot take `impl Trait`: name a concrete type that implements `lintel::stub::Wire`",
        ),
        Type::Ptr(_) => err(
            ty,
            "a raw pointer cannot cross a door: pass the data as `&[u8]` or a `Wire` value",
        ),
        Type::BareFn(_) | Type::TraitObject(_) => err(
            ty,
            "code cannot cross a door: pass a `lintel::Door` or another interface's client instead",
        ),
        Type::Paren(p) => param_kind(&p.elem),
        Type::Group(g) => param_kind(&g.elem),
        Type::Infer(_) | Type::Never(_) | Type::Macro(_) | Type::Verbatim(_) => {
            err(ty, "unsupported parameter type")
        }
        _ => Ok(Kind::Value(Box::new(ty.clone()))),
    }
}

fn is_ident(ty: &Type, name: &str) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.is_ident(name))
}

fn is_vec_u8(ty: &Type) -> bool {
    let Type::Path(p) = ty else { return false };
    let Some(last) = p.path.segments.last() else {
        return false;
    };
    if last.ident != "Vec" {
        return false;
    }
    let PathArguments::AngleBracketed(a) = &last.arguments else {
        return false;
    };
    a.args.len() == 1 && matches!(a.args.first(), Some(GenericArgument::Type(t)) if is_ident(t, "u8"))
}

const NEED_RESULT: &str = "an interface method must return `Result<T, E>` (written out, not an alias), where `T: lintel::stub::Wire` and `E: lintel::stub::ServiceError`, i.e. an error type that implements `Wire` and `From<lintel::stub::StubError>` so it can report lintel's failures too";

fn result_types(out: &ReturnType, name: &Ident) -> syn::Result<(Type, Type)> {
    let ty = match out {
        ReturnType::Default => return err(name, NEED_RESULT),
        ReturnType::Type(_, t) => &**t,
    };
    let Type::Path(p) = ty else {
        return err(ty, NEED_RESULT);
    };
    let Some(last) = p.path.segments.last() else {
        return err(ty, NEED_RESULT);
    };
    if last.ident != "Result" {
        return err(ty, NEED_RESULT);
    }
    let PathArguments::AngleBracketed(a) = &last.arguments else {
        return err(ty, NEED_RESULT);
    };
    let tys: Vec<&Type> = a
        .args
        .iter()
        .filter_map(|g| match g {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect();
    if tys.len() != 2 || a.args.len() != 2 {
        return err(ty, NEED_RESULT);
    }
    Ok((tys[0].clone(), tys[1].clone()))
}

fn generate(tr: &ItemTrait, methods: &[Method]) -> TokenStream {
    let vis = &tr.vis;
    let tname = &tr.ident;
    let iface = tname.to_string();
    let client = format_ident!("{}Client", tname);
    let server = format_ident!("{}Server", tname);
    let atrait = format_ident!("{}Async", tname);
    let aclient = format_ident!("{}AsyncClient", tname);
    let aserver = format_ident!("{}AsyncServer", tname);
    let lt = quote!(::lintel);
    let st = quote!(::lintel::stub);

    let method_table: Vec<_> = methods
        .iter()
        .map(|m| {
            let n = m.name.to_string();
            let num = m.number;
            quote!((#n, #num))
        })
        .collect();

    // Compile-time checks on the user's types, each pointing at the type.
    let mut asserts = Vec::new();
    for m in methods {
        let (ok, e) = (&m.ok, &m.err);
        asserts.push(quote_spanned! {ok.span()=>
            { fn __lintel_result_is_wire<T: #st::Wire>() {} __lintel_result_is_wire::<#ok>(); }
        });
        asserts.push(quote_spanned! {e.span()=>
            { fn __lintel_error_is_service_error<E: #st::ServiceError>() {} __lintel_error_is_service_error::<#e>(); }
        });
        for k in &m.params {
            if let Kind::Value(t) = k {
                asserts.push(quote_spanned! {t.span()=>
                    { fn __lintel_param_is_wire<T: #st::Wire>() {} __lintel_param_is_wire::<#t>(); }
                });
            }
        }
    }

    let (mut client_methods, mut remote_methods, mut awaited_methods) = (Vec::new(), Vec::new(), Vec::new());
    for m in methods {
        let (c, r, a) = client_method(m, tname, &server, &client);
        client_methods.push(c);
        remote_methods.push(r);
        awaited_methods.push(a);
    }
    let method_consts: Vec<_> = methods.iter().map(|m| method_const_item(m, &iface)).collect();
    let dispatch_arms: Vec<_> = methods.iter().map(|m| dispatch_arm(m, tname, None)).collect();
    let async_arms: Vec<_> = methods
        .iter()
        .map(|m| dispatch_arm(m, tname, Some(&atrait)))
        .collect();
    let async_trait = async_trait(tr, &atrait);
    let call_async = quote_spanned! {Span::mixed_site()=>
        fn call(&self, req: #lt::AsyncRequest) -> #lt::HandlerFuture {
            let imp = ::std::sync::Arc::clone(&self.imp);
            ::std::boxed::Box::pin(async move {
                let mut __reply = #lt::Reply::new();
                let reply = &mut __reply;
                let __doors = req.doors;
                let (method, mut r) = #st::request(&req.data, &__doors, req.buffers)?;
                let __done: ::core::result::Result<(), #lt::Fault> = match method {
                    #(#async_arms)*
                    _ => ::core::result::Result::Err(#st::unknown_method()),
                };
                __done?;
                ::core::result::Result::Ok(__reply)
            })
        }
    };

    // Generated with hygienic locals, like the dispatch arms it holds.
    let invoke = quote_spanned! {Span::mixed_site()=>
        fn invoke(
            &self,
            req: #lt::Request<'_>,
            reply: &mut #lt::Reply,
        ) -> ::core::result::Result<(), #lt::Fault> {
            let (method, mut r) = #st::request(req.data, &req.doors, req.buffers.into_vec())?;
            match method {
                #(#dispatch_arms)*
                _ => ::core::result::Result::Err(#st::unknown_method()),
            }
        }
    };

    let client_doc = format!(
        "Client of the [`{tname}`] interface over a door: calls the server directly when it runs in this domain, else marshals the call. Generated by `#[lintel::interface]`."
    );
    let client_basics = quote! {
            /// Name of the interface.
            pub const INTERFACE: &'static str = #iface;

            /// A client for a door that serves this interface.
            pub fn from_door(door: #lt::Door) -> Self {
                Self { door }
            }

            /// The door this client calls.
            pub fn door(&self) -> &#lt::Door {
                &self.door
            }

            /// The door this client calls.
            pub fn into_door(self) -> #lt::Door {
                self.door
            }
    };
    let client_conversions = conversions(&client);
    let aclient_conversions = conversions(&aclient);
    let atrait_doc = format!(
        "[`{tname}`] with `async` methods, for implementations served by async handlers ([`{aserver}`]): write each method as an `async fn`. Generated by `#[lintel::interface]`."
    );
    let aclient_doc = format!(
        "Client of the [`{tname}`] interface whose calls are awaited (`lintel::Door::call_async`): the task parks, not the thread. Generated by `#[lintel::interface]`."
    );
    let aserver_doc = format!(
        "Serves an implementation of [`{atrait}`] through doors with async handlers: each call runs as a task on a tokio runtime, and no server thread waits while it awaits. Generated by `#[lintel::interface]`."
    );
    let server_doc = format!(
        "Serves an implementation of [`{tname}`] through doors: decodes each call, rejects malformed ones before user code runs, and encodes the result. Generated by `#[lintel::interface]`."
    );

    let mut tr = tr.clone();
    tr.attrs.push(syn::parse_quote!(#[allow(clippy::ptr_arg)]));

    quote! {
        #tr

        #[doc = #client_doc]
        #[derive(Clone, Debug)]
        #vis struct #client {
            door: #lt::Door,
        }

        impl #client {
            #client_basics

            #(#method_consts)*

            #(#remote_methods)*
        }

        #client_conversions

        impl #tname for #client {
            #(#client_methods)*
        }

        #[doc = #server_doc]
        #vis struct #server {
            imp: ::std::sync::Arc<dyn #tname + ::core::marker::Send + ::core::marker::Sync>,
        }

        impl #server {
            /// Name of the interface.
            pub const INTERFACE: &'static str = #iface;
            /// Each method's name and number (the FNV-1a hash of its name).
            pub const METHODS: &'static [(&'static str, u32)] = &[#(#method_table),*];

            /// Serve `imp`.
            pub fn new(imp: impl #tname + ::core::marker::Send + ::core::marker::Sync + 'static) -> Self {
                Self { imp: ::std::sync::Arc::new(imp) }
            }

            /// Serve a shared implementation (the caller may keep a handle).
            pub fn from_arc(imp: ::std::sync::Arc<dyn #tname + ::core::marker::Send + ::core::marker::Sync>) -> Self {
                Self { imp }
            }

            /// The implementation served.
            pub fn get_ref(&self) -> &(dyn #tname + ::core::marker::Send + ::core::marker::Sync) {
                &*self.imp
            }

            /// A door, served by this domain, that calls this server.
            pub fn into_door(self) -> #lt::Door {
                #lt::Door::create(0, self)
            }

            /// Like [`Self::into_door`], running `unreferenced` once no
            /// other domain holds the door.
            pub fn into_door_with_unref(
                self,
                unreferenced: impl Fn(u64) + ::core::marker::Send + ::core::marker::Sync + 'static,
            ) -> #lt::Door {
                #lt::Door::create_with_unref(0, self, unreferenced)
            }

            /// A door serving `imp`.
            pub fn door(imp: impl #tname + ::core::marker::Send + ::core::marker::Sync + 'static) -> #lt::Door {
                Self::new(imp).into_door()
            }

            /// A client of a new door serving `imp`.
            pub fn serve(imp: impl #tname + ::core::marker::Send + ::core::marker::Sync + 'static) -> #client {
                #client::from_door(Self::door(imp))
            }
        }

        impl #lt::Handler for #server {
            #invoke

            fn as_any(&self) -> ::core::option::Option<&(dyn ::core::any::Any + ::core::marker::Send + ::core::marker::Sync)> {
                ::core::option::Option::Some(self)
            }
        }

        // (The async items go unused where a crate uses only blocking
        // ones: no warning for them.)
        #[doc = #atrait_doc]
        #[allow(dead_code)]
        #async_trait

        #[doc = #aclient_doc]
        #[derive(Clone, Debug)]
        #[allow(dead_code)]
        #vis struct #aclient {
            door: #lt::Door,
        }

        #[allow(dead_code)]
        impl #aclient {
            #client_basics

            #(#awaited_methods)*
        }

        impl ::core::convert::From<#client> for #aclient {
            fn from(c: #client) -> #aclient {
                #aclient::from_door(c.door)
            }
        }

        #aclient_conversions

        #[doc = #aserver_doc]
        #[allow(dead_code)]
        #vis struct #aserver<I> {
            imp: ::std::sync::Arc<I>,
        }

        #[allow(dead_code)]
        impl<I: #atrait + ::core::marker::Send + ::core::marker::Sync + 'static> #aserver<I> {
            /// Name of the interface.
            pub const INTERFACE: &'static str = #iface;

            /// Serve `imp`.
            pub fn new(imp: I) -> Self {
                Self { imp: ::std::sync::Arc::new(imp) }
            }

            /// Serve a shared implementation (the caller may keep a handle).
            pub fn from_arc(imp: ::std::sync::Arc<I>) -> Self {
                Self { imp }
            }

            /// A door, served by this domain on the current tokio runtime
            /// (panics outside one), that calls this server.
            pub fn into_door(self) -> #lt::Door {
                #lt::Door::create_async(0, self)
            }

            /// A door served on the runtime `rt`.
            pub fn into_door_on(self, rt: #lt::RuntimeHandle) -> #lt::Door {
                #lt::Door::create_async_on(rt, 0, self)
            }

            /// A door serving `imp` on the current runtime.
            pub fn door(imp: I) -> #lt::Door {
                Self::new(imp).into_door()
            }

            /// A client of a new door serving `imp` on the current runtime.
            pub fn serve(imp: I) -> #aclient {
                #aclient::from_door(Self::door(imp))
            }
        }

        impl<__I: #atrait + ::core::marker::Send + ::core::marker::Sync + 'static> #lt::AsyncHandler for #aserver<__I> {
            #call_async
        }

        const _: () = {
            #[allow(dead_code)]
            fn __lintel_checks() {
                #(#asserts)*
            }
        };
    }
}

/// What a client type (blocking or awaited) converts to and from: its door,
/// and the stub encoding, in which it crosses as its door.
fn conversions(client: &Ident) -> TokenStream {
    let lt = quote!(::lintel);
    let st = quote!(::lintel::stub);
    quote! {
        impl ::core::convert::From<#client> for #lt::Door {
            fn from(c: #client) -> #lt::Door {
                c.door
            }
        }

        impl ::core::convert::From<#lt::Door> for #client {
            fn from(door: #lt::Door) -> #client {
                #client::from_door(door)
            }
        }

        /// A client crosses a door as its door; the receiver gets a client.
        impl #st::Wire for #client {
            #[inline]
            fn encode(&self, w: &mut #st::Writer<'_>) {
                w.door(&self.door);
            }
            #[inline]
            fn decode(r: &mut #st::Reader<'_>) -> ::core::result::Result<Self, #st::WireError> {
                ::core::result::Result::Ok(Self { door: r.door()? })
            }
        }
    }
}

/// The trait's async twin: each method returns a `Send` future of its
/// result (so an implementation writes `async fn`), without default bodies.
fn async_trait(tr: &ItemTrait, name: &Ident) -> TokenStream {
    let mut at = tr.clone();
    at.ident = name.clone();
    at.attrs.retain(|a| !a.path().is_ident("doc"));
    for it in &mut at.items {
        if let TraitItem::Fn(f) = it {
            f.default = None;
            f.semi_token = Some(Default::default());
            // A method without a body names its parameters plainly.
            for (i, arg) in f.sig.inputs.iter_mut().skip(1).enumerate() {
                if let FnArg::Typed(pt) = arg {
                    let plain = match &*pt.pat {
                        Pat::Ident(p) if p.subpat.is_none() => p.ident.clone(),
                        _ => format_ident!("arg{}", i),
                    };
                    *pt.pat = syn::parse_quote!(#plain);
                }
            }
            f.attrs.retain(|a| !a.path().is_ident("doc"));
            if let ReturnType::Type(_, t) = &f.sig.output {
                let t = t.clone();
                f.sig.output =
                    syn::parse_quote!(-> impl ::core::future::Future<Output = #t> + ::core::marker::Send);
            }
        }
    }
    quote!(#at)
}

/// The client's associated constant naming method `name` (its interface,
/// name and number), shared by the co-located and the remote path.
fn method_const(name: &Ident) -> Ident {
    format_ident!("__lintel_method_{}", name)
}

/// The constant of [`method_const`], for the client's inherent impl.
fn method_const_item(m: &Method, iface: &str) -> TokenStream {
    let st = quote!(::lintel::stub);
    let c = method_const(&m.name);
    let mname = m.name.to_string();
    let number = m.number;
    quote! {
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        const #c: #st::Method = #st::Method {
            interface: #iface,
            name: #mname,
            number: #number,
        };
    }
}

/// Whether `m`'s reply carries its one out buffer ahead of its result
/// (`lintel::stub::end_leading_out`): a method with exactly one `&mut
/// Vec<u8>` out parameter and no in-out ones. Its handler writes straight
/// into the reply's bytes, one copy fewer than a buffer of its own.
fn leading_out(m: &Method) -> bool {
    let outs = m.params.iter().filter(|k| matches!(k, Kind::Out)).count();
    let inouts = m
        .params
        .iter()
        .filter(|k| matches!(k, Kind::InOutVec | Kind::InOutSlice))
        .count();
    outs == 1 && inouts == 0
}

/// The client's trait method, and the inherent method behind it that
/// marshals the call.
fn client_method(
    m: &Method,
    tname: &Ident,
    server: &Ident,
    client: &Ident,
) -> (TokenStream, TokenStream, TokenStream) {
    let ms = Span::mixed_site();
    let st = quote!(::lintel::stub);
    let name = &m.name;
    let (ok, e) = (&m.ok, &m.err);
    let args = &m.args;
    let remote = format_ident!("__lintel_remote_{}", name);
    let method = method_const(name);

    let mut decl = Vec::new(); // the method's parameters
    let mut size = Vec::new(); // co-located: argument bytes and doors
    let mut pre = Vec::new(); // co-located: before the call
    let mut extra = Vec::new(); // co-located: result bytes of buffers
    let mut enc = Vec::new(); // remote: encode the arguments
    let mut dec = Vec::new(); // remote: decode buffers from the reply
    let mut lead: Option<Ident> = None; // remote: the one out buffer, ahead of the result
    let mut clear = Vec::new(); // co-located: out buffers of a result too large to send
    for (k, a) in m.params.iter().zip(args) {
        match k {
            Kind::Buffer(t) => {
                decl.push(quote!(#a: #t));
                enc.push(quote_spanned!(ms=> __w.buffer(<#t as #st::Passed>::into_buffer(#a));));
            }
            Kind::Value(t) => {
                decl.push(quote!(#a: #t));
                // The call carries the type's span, so that a type that is
                // not `Wire` is reported there.
                let arg = Ident::new("__arg", ms);
                let measure = quote_spanned!(t.span()=> ::lintel::stub::wire_measure(#arg));
                size.push(quote_spanned! {ms=>
                    {
                        let #arg = &#a;
                        let (b, d, n) = #measure;
                        __bytes += b;
                        __doors += d;
                        __items = __items.max(n);
                    }
                });
                enc.push(quote_spanned!(ms=> <#t as #st::Wire>::encode(&#a, &mut __w);));
            }
            Kind::Bytes | Kind::Str => {
                let ty = if matches!(k, Kind::Bytes) {
                    quote!(&[u8])
                } else {
                    quote!(&str)
                };
                decl.push(quote!(#a: #ty));
                size.push(quote_spanned!(ms=> __bytes += #st::buf_size(#a.len());));
                enc.push(quote_spanned!(ms=> __w.len_bytes(#a.as_ref());));
            }
            Kind::Out => {
                decl.push(quote!(#a: &mut ::std::vec::Vec<u8>));
                pre.push(quote!(#a.clear();));
                clear.push(quote!(#a.clear();));
                extra.push(quote!(+ #st::buf_size(#a.len())));
                if leading_out(m) {
                    lead = Some(a.clone());
                } else {
                    dec.push(quote_spanned!(ms=> #st::decode_out(__r, #a)?;));
                }
            }
            Kind::InOutVec => {
                decl.push(quote!(#a: &mut ::std::vec::Vec<u8>));
                size.push(quote_spanned!(ms=> __bytes += #st::buf_size(#a.len());));
                extra.push(quote!(+ #st::buf_size(#a.len())));
                enc.push(quote_spanned!(ms=> __w.len_bytes(#a);));
                dec.push(quote_spanned!(ms=> #st::decode_out(__r, #a)?;));
            }
            Kind::InOutSlice => {
                decl.push(quote!(#a: &mut [u8]));
                size.push(quote_spanned!(ms=> __bytes += #st::buf_size(#a.len());));
                extra.push(quote!(+ #st::buf_size(#a.len())));
                enc.push(quote_spanned!(ms=> __w.len_bytes(#a);));
                dec.push(quote_spanned!(ms=> #st::decode_inout(__r, #a)?;));
            }
        }
    }
    let call_args: Vec<_> = m
        .params
        .iter()
        .zip(args)
        .map(|(k, a)| match k {
            Kind::Value(_) | Kind::Bytes | Kind::Str | Kind::Buffer(_) => quote!(#a),
            Kind::Out | Kind::InOutVec | Kind::InOutSlice => quote!(&mut *#a),
        })
        .collect();
    // Arguments passed by value move into the co-located call only if it
    // happens; otherwise they are still here for marshalling.
    let held: Vec<&Ident> = m
        .params
        .iter()
        .zip(args)
        .filter(|(k, _)| matches!(k, Kind::Value(_) | Kind::Buffer(_)))
        .map(|(_, a)| a)
        .collect();

    // The call carries the error type's span, so that an error type that
    // is not a `ServiceError` is reported there, once. So does its
    // argument, bound in a match arm that uses nothing else: a parameter
    // of the same name is not used in that arm.
    let out = Ident::new("__out", e.span());
    let outcome = quote_spanned!(e.span()=> ::lintel::stub::local_outcome(#out));
    let client_method = quote_spanned! {ms=>
        fn #name(&self, #(#decl),*) -> ::core::result::Result<#ok, #e> {
            #(#pre)*
            // Co-located: check what the remote path would send, then call
            // the implementation directly.
            if self.door.is_local() {
                let mut __bytes = #st::METHOD_BYTES;
                let mut __doors = 0usize;
                #[allow(unused_mut)]
                let mut __items = 0usize;
                #(#size)*
                if let ::core::result::Result::Err(e) =
                    Self::#method.check_items(__items).and_then(|()| #st::check_args(__bytes, __doors))
                {
                    return ::core::result::Result::Err(<#e as ::core::convert::From<#st::StubError>>::from(e));
                }
                let mut __held = ::core::option::Option::Some((#(#held,)*));
                let __local = self.door.with_local(
                    |__srv: &#server, _datum: u64| -> ::core::result::Result<::core::result::Result<#ok, #e>, #st::StubError> {
                        let (#(#held,)*) = __held.take().expect("moved once");
                        let __res = <dyn #tname + ::core::marker::Send + ::core::marker::Sync as #tname>::#name(&*__srv.imp, #(#call_args),*);
                        if let ::core::result::Result::Err(e) = #st::check_result(&__res, 0 #(#extra)*) {
                            // The remote path would return nothing: no out bytes either.
                            #(#clear)*
                            return ::core::result::Result::Err(e);
                        }
                        ::core::result::Result::Ok(__res)
                    },
                );
                match __local {
                    ::core::option::Option::Some(#out) => return #outcome,
                    ::core::option::Option::None => {
                        let (#(#held,)*) = __held.expect("not moved when not co-located");
                        return Self::#remote(self, #(#args),*);
                    }
                }
            }
            Self::#remote(self, #(#args),*)
        }
    };
    // The marshalled call, the same for the blocking client (`send`) and
    // the awaited one (`send_async(..).await`).
    let marshalled = |awaited: bool| {
        let wait = awaited.then(|| quote!(.await));
        let send_and_decode = match &lead {
            // The one out buffer ahead of the result: the reply's bytes
            // become the caller's vector (`Call::send_leading`).
            Some(a) => {
                let send = match awaited {
                    true => quote_spanned!(ms=> send_async_leading),
                    false => quote_spanned!(ms=> send_leading),
                };
                quote_spanned! {ms=>
                    let __reply = __call.#send(&self.door, #a, |__r: #st::Reader<'_>| {
                        #st::decode_reply(&#client::#method, __r, |__r| {
                            #st::decode_result::<#ok, #e>(__r)
                        })
                    })#wait;
                }
            }
            None => {
                let send = match awaited {
                    true => quote_spanned!(ms=> send_async),
                    false => quote_spanned!(ms=> send),
                };
                quote_spanned! {ms=>
                    let __reply = __call.#send(&self.door)#wait.and_then(|__r| {
                        #st::decode_reply(&#client::#method, __r, |__r| {
                            let __v = #st::decode_result::<#ok, #e>(__r)?;
                            #(#dec)*
                            ::core::result::Result::Ok(__v)
                        })
                    });
                }
            }
        };
        quote_spanned! {ms=>
            let mut __call = #st::Call::new(#client::#method);
            {
                let mut __w = __call.writer();
                #(#enc)*
            }
            #send_and_decode
            match __reply {
                ::core::result::Result::Ok(v) => v,
                ::core::result::Result::Err(e) => {
                    ::core::result::Result::Err(<#e as ::core::convert::From<#st::StubError>>::from(e))
                }
            }
        }
    };
    let blocking = marshalled(false);
    let awaiting = marshalled(true);
    let remote = quote_spanned! {ms=>
        #[doc(hidden)]
        #[allow(clippy::ptr_arg, clippy::too_many_arguments)]
        fn #remote(&self, #(#decl),*) -> ::core::result::Result<#ok, #e> {
            #blocking
        }
    };
    let awaited = quote_spanned! {ms=>
        #[allow(clippy::ptr_arg, clippy::too_many_arguments)]
        pub async fn #name(&self, #(#decl),*) -> ::core::result::Result<#ok, #e> {
            #awaiting
        }
    };
    (client_method, remote, awaited)
}

/// The server's match arm for one method: decode the arguments (the
/// request's reader `r` and the `reply` come from `invoke`, which is
/// generated with the same hygiene), call the implementation, encode.
fn dispatch_arm(m: &Method, tname: &Ident, asynk: Option<&Ident>) -> TokenStream {
    let ms = Span::mixed_site();
    let st = quote!(::lintel::stub);
    let name = &m.name;
    let number = m.number;
    let mut dec = Vec::new();
    let mut call_args = Vec::new();
    let mut outs = Vec::new();
    let mut lead: Option<Ident> = None;
    for (k, a) in m.params.iter().zip(&m.args) {
        match k {
            Kind::Value(t) => {
                dec.push(quote_spanned!(ms=> let #a = <#t as #st::Wire>::decode(&mut r).map_err(#st::bad_request)?;));
                call_args.push(quote!(#a));
            }
            Kind::Buffer(t) => {
                dec.push(
                    quote_spanned!(ms=> let #a = #st::next_buffer::<#t>(&mut r).map_err(#st::bad_request)?;),
                );
                call_args.push(quote!(#a));
            }
            Kind::Bytes => {
                dec.push(quote_spanned!(ms=> let #a: &[u8] = r.len_bytes().map_err(#st::bad_request)?;));
                call_args.push(quote!(#a));
            }
            Kind::Str => {
                dec.push(quote_spanned!(ms=> let #a: &str = r.str().map_err(#st::bad_request)?;));
                call_args.push(quote!(#a));
            }
            Kind::Out if leading_out(m) => {
                // The reply's own bytes, empty before the handler runs.
                dec.push(quote_spanned!(ms=>
                    let mut #a = ::core::mem::take(&mut reply.data);
                    #a.clear();
                ));
                call_args.push(quote!(&mut #a));
                lead = Some(a.clone());
            }
            Kind::Out => {
                dec.push(quote!(let mut #a = #st::OutBuf::new();));
                call_args.push(quote!(&mut *#a));
                outs.push(quote_spanned!(ms=> #st::encode_buf(&#a, reply);));
            }
            Kind::InOutVec | Kind::InOutSlice => {
                dec.push(quote_spanned!(ms=>
                    let mut #a = #st::OutBuf::from_slice(r.len_bytes().map_err(#st::bad_request)?);
                ));
                if matches!(k, Kind::InOutVec) {
                    call_args.push(quote!(&mut *#a));
                } else {
                    call_args.push(quote!(&mut #a[..]));
                }
                outs.push(quote_spanned!(ms=> #st::encode_buf(&#a, reply);));
            }
        }
    }
    let run = match asynk {
        None => quote_spanned! {ms=>
            <dyn #tname + ::core::marker::Send + ::core::marker::Sync as #tname>::#name(&*self.imp, #(#call_args),*)
        },
        Some(atrait) => quote_spanned! {ms=>
            <__I as #atrait>::#name(&*imp, #(#call_args),*).await
        },
    };
    let encode = match &lead {
        Some(a) => quote_spanned! {ms=>
            let __n = #a.len();
            reply.data = #a;
            #st::end_leading_out(__n, &__res, reply);
        },
        None => quote_spanned! {ms=>
            #st::encode_result(&__res, reply);
            #(#outs)*
        },
    };
    quote_spanned! {ms=>
        #number => {
            #(#dec)*
            r.finish().map_err(#st::bad_request)?;
            let __res = #run;
            #encode
            ::core::result::Result::Ok(())
        }
    }
}
