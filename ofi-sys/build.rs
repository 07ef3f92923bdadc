//! Generates the libfabric bindings from the headers installed on this machine.
//!
//! libfabric is located with pkg-config (>= 1.17); bindgen needs libclang. Either missing
//! gives a build error that names the Debian package to install.

use std::env;
use std::path::PathBuf;

const MIN_VERSION: &str = "1.17";

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let lib = match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .probe("libfabric")
    {
        Ok(lib) => lib,
        Err(e) => fail(&format!(
            "libfabric >= {MIN_VERSION} was not found through pkg-config ({e}).\n\
             Install it: apt-get install libfabric-dev pkg-config  \
             (or run scripts/setup-deps as root)"
        )),
    };

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid_.*|fid")
        .allowlist_var("FI_.*")
        // C enums become plain constants: an unknown value coming back from C can never be UB.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for path in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }

    // bindgen panics when libclang cannot be loaded; turn that into an actionable message.
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
    let bindings = match generated {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => fail(&format!(
            "bindgen could not parse the libfabric headers: {e}.\n\
             Install libclang: apt-get install libclang-dev"
        )),
        Err(_) => fail(
            "bindgen could not load libclang.\n\
             Install it: apt-get install libclang-dev  (or run scripts/setup-deps as root)",
        ),
    };

    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs into OUT_DIR");
    println!("cargo:version={}", lib.version);
}

fn fail(msg: &str) -> ! {
    eprintln!("\n=== ofi-sys build error ===\n{msg}\n");
    panic!("{msg}");
}
