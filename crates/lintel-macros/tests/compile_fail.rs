//! Misuse of `#[lintel::interface]` and `#[derive(Wire)]` is a compile
//! error at the offending token that says how to fix it.

#[test]
fn misuse_is_a_clear_compile_error() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
