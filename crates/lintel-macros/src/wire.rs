//! `#[derive(Wire)]`: fields in declaration order, enums as a one-byte
//! variant index followed by the variant's fields.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, parse_quote};

pub fn expand(item: TokenStream) -> syn::Result<TokenStream> {
    let mut input: DeriveInput = syn::parse2(item)?;
    let params: Vec<_> = input.generics.type_params().map(|p| p.ident.clone()).collect();
    for id in &params {
        input
            .generics
            .make_where_clause()
            .predicates
            .push(parse_quote!(#id: ::lintel::stub::Wire));
    }
    let name = &input.ident;
    let (imp, ty, whr) = input.generics.split_for_impl();

    let (encode, decode) = match &input.data {
        Data::Struct(s) => {
            let (pat, enc, dec) = fields(&s.fields);
            (
                quote! { let Self #pat = self; #(#enc)* },
                quote! { ::core::result::Result::Ok(Self #dec) },
            )
        }
        Data::Enum(e) => {
            if e.variants.len() > 256 {
                return Err(syn::Error::new_spanned(
                    name,
                    "#[derive(Wire)] supports enums of at most 256 variants; nest them or implement lintel::stub::Wire by hand",
                ));
            }
            let mut enc_arms = Vec::new();
            let mut dec_arms = Vec::new();
            for (i, v) in e.variants.iter().enumerate() {
                let tag = i as u8;
                let vid = &v.ident;
                let (pat, enc, dec) = fields(&v.fields);
                enc_arms.push(quote! {
                    Self::#vid #pat => { __w.bytes(&[#tag]); #(#enc)* }
                });
                dec_arms.push(quote! {
                    #tag => ::core::result::Result::Ok(Self::#vid #dec),
                });
            }
            (
                quote! { match self { #(#enc_arms)* } },
                quote! {
                    match <u8 as ::lintel::stub::Wire>::decode(__r)? {
                        #(#dec_arms)*
                        _ => ::core::result::Result::Err(::lintel::stub::WireError("invalid enum tag")),
                    }
                },
            )
        }
        Data::Union(u) => {
            return Err(syn::Error::new_spanned(
                u.union_token,
                "#[derive(Wire)] cannot encode a union: implement lintel::stub::Wire by hand",
            ));
        }
    };

    Ok(quote! {
        impl #imp ::lintel::stub::Wire for #name #ty #whr {
            #[allow(unused_variables)]
            fn encode(&self, __w: &mut ::lintel::stub::Writer<'_>) {
                #encode
            }
            #[allow(unused_variables)]
            fn decode(__r: &mut ::lintel::stub::Reader<'_>) -> ::core::result::Result<Self, ::lintel::stub::WireError> {
                #decode
            }
        }
    })
}

/// For one set of fields: the pattern binding them, the statements
/// encoding the bindings, and the constructor decoding them.
fn fields(f: &Fields) -> (TokenStream, Vec<TokenStream>, TokenStream) {
    let bind: Vec<_> = (0..f.len()).map(|i| format_ident!("__f{}", i)).collect();
    let enc = f
        .iter()
        .zip(&bind)
        .map(|(fd, b)| {
            let t = &fd.ty;
            quote! { <#t as ::lintel::stub::Wire>::encode(#b, __w); }
        })
        .collect();
    let dec: Vec<_> = f
        .iter()
        .map(|fd| {
            let t = &fd.ty;
            quote! { <#t as ::lintel::stub::Wire>::decode(__r)? }
        })
        .collect();
    match f {
        Fields::Named(n) => {
            let names: Vec<_> = n.named.iter().map(|fd| fd.ident.as_ref()).collect();
            (
                quote! { { #(#names: #bind),* } },
                enc,
                quote! { { #(#names: #dec),* } },
            )
        }
        Fields::Unnamed(_) => (quote! { ( #(#bind),* ) }, enc, quote! { ( #(#dec),* ) }),
        Fields::Unit => (quote! {}, enc, quote! {}),
    }
}
