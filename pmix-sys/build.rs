//! Generates PMIx client bindings when pkg-config finds `pmix` (Debian: libpmix-dev), and
//! builds an empty crate otherwise: PMIx is optional, the library must build without it.
//!
//! What was found is told to the code as `cfg(pmix_found)` and to dependents' build scripts
//! as `DEP_PMIX_FOUND` (`1` or `0`).

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(pmix_found)");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=MCAPI_NO_PMIX");

    // MCAPI_NO_PMIX=1 at build time: build as on a machine without PMIx (tests that path).
    let wanted = env::var("MCAPI_NO_PMIX").map_or(true, |v| v.is_empty() || v == "0");
    let lib = if wanted {
        match pkg_config::Config::new().atleast_version("4").probe("pmix") {
            Ok(lib) => Some(lib),
            Err(e) => {
                let why = e.to_string().replace('\n', " ");
                println!("cargo:warning=building without PMIx (no launcher bootstrap): {why}");
                None
            }
        }
    } else {
        None
    };
    let Some(lib) = lib else {
        println!("cargo:found=0");
        return;
    };

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("PMIx_(Init|Finalize|Initialized|Get|Publish|Lookup|Unpublish|Error_string|Info_load|Value_destruct)")
        .allowlist_type("pmix_.*")
        .allowlist_var("PMIX_.*")
        // C enums as plain constants: an unknown value coming back from C is never UB.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .derive_default(true)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for path in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    // bindgen panics when libclang cannot be loaded: fall back to "no PMIx", loudly.
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
    let bindings = match generated {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            println!("cargo:warning=pmix.h found but not parsed ({e}): building without PMIx");
            println!("cargo:found=0");
            return;
        }
        Err(_) => {
            println!("cargo:warning=libclang not loadable: building without PMIx");
            println!("cargo:found=0");
            return;
        }
    };
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs into OUT_DIR");
    println!("cargo:rustc-cfg=pmix_found");
    println!("cargo:found=1");
}
