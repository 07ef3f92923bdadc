//! Link arguments of `libmcapi.so`: the soname of the MCAPI 2.000 ABI and a version script
//! that exports the `mcapi_*`/`mca_*` functions only (docs/c-abi.md).

fn main() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("libmcapi.map");
    println!("cargo:rerun-if-changed={}", script.display());
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmcapi.so.2");
        println!(
            "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
            script.display()
        );
    }
}
