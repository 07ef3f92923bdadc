//! The C ABI from C: installs libmcapi into a private prefix, checks the headers against the
//! Rust side (constants, layouts, signatures, exported symbols), builds the C programs of
//! `tests/c/` with `cc $(pkg-config --cflags --libs mcapi)` and runs them as separate
//! processes over shm and tcp. One test at a time (processes and ports).
//!
//! Uses the `libmcapi.so` and `libmcapi.a` that `cargo test` builds with the library, beside
//! this test's executable in `target/<profile>/deps` (`cargo build` copies them one level up).

use libtest_mimic::{Arguments, Failed, Trial};
use mcapi::attributes::{
    EndpointAttribute, FIFO_BUFFER, LOCAL_MEMORY, NODE_ATTR_EAGER_MAX, NODE_ATTR_MAX_MSG_SIZE,
    NODE_ATTR_TYPE, NODE_ATTR_TYPE_REGULAR,
};
use mcapi::capi::{self, mcapi_info_t, mcapi_node_attributes_t, mcapi_param_t};
use mcapi::semantics::status::STATUSCODE_END;
use mcapi::Status;
use std::collections::{BTreeMap, BTreeSet};
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// Flags every C program of the tests is built with.
const C_FLAGS: &[&str] = &[
    "-std=c99",
    "-D_POSIX_C_SOURCE=200809L",
    "-Wall",
    "-Wextra",
    "-pedantic",
    "-Werror",
    "-pthread",
];

fn main() {
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let mut trials = vec![
        Trial::test("headers::constants_and_layouts_match_rust", constants_match),
        Trial::test(
            "headers::signatures_match_rust_and_exports",
            signatures_match,
        ),
        Trial::test("headers::compile_as_cxx", compile_as_cxx),
        Trial::test("library::soname_and_exported_symbols", soname_and_exports),
        Trial::test("install::pkg_config_shared_and_static", pkg_config_programs),
        Trial::test(
            "library::a_failed_initialize_says_why",
            failed_initialize_says_why,
        ),
    ];
    for provider in ["shm", "tcp", "sockets"] {
        let absent = mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(provider)).is_err();
        let provider_trials = [
            Trial::test(format!("{provider}::c_suite"), move || {
                c_suite(provider, &[])
            }),
            Trial::test(format!("{provider}::example_7_1"), move || {
                example_7_1(provider)
            }),
            Trial::test(format!("{provider}::example_7_2"), move || {
                example_7_2(provider)
            }),
            Trial::test(format!("{provider}::example_7_3_8"), move || {
                example_7_3_8(provider)
            }),
            Trial::test(format!("{provider}::example_7_4_3"), move || {
                example_7_4_3(provider)
            }),
            Trial::test(format!("{provider}::example_7_5"), move || {
                example_7_5(provider)
            }),
            Trial::test(format!("{provider}::random_calls"), move || {
                random_calls(provider, &[])
            }),
            Trial::test(format!("{provider}::compat_modes"), move || {
                compat_modes(provider)
            }),
            Trial::test(format!("{provider}::error_codes"), move || {
                error_codes(provider)
            }),
            Trial::test(format!("{provider}::mca_style_program"), move || {
                mca_style_program(provider)
            }),
            Trial::test(format!("{provider}::same_node_chan_spec"), move || {
                same_node_chan(provider, "spec")
            }),
            Trial::test(format!("{provider}::same_node_chan_mca"), move || {
                same_node_chan(provider, "mca")
            }),
            Trial::test(format!("{provider}::same_node_msg"), move || {
                same_node_msg(provider)
            }),
            Trial::test(
                format!("{provider}::max_msg_size_and_eager_max"),
                move || max_msg(provider),
            ),
        ];
        for trial in provider_trials {
            if absent {
                eprintln!("skipping {}: provider {provider} not offered", trial.name());
            }
            trials.push(trial.with_ignored_flag(absent));
        }
    }
    trials.push(Trial::test("shm::random_calls_under_asan_ubsan", || {
        random_calls("shm", SANITIZERS)
    }));
    trials.push(Trial::test("shm::c_suite_under_asan_ubsan", || {
        c_suite("shm", SANITIZERS)
    }));
    libtest_mimic::run(&args, trials).exit();
}

// ---- where things are ----

/// `target/<profile>/deps`: where this build put libmcapi.so and libmcapi.a.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .expect("test executable directory")
        .to_path_buf()
}

/// Scratch space for the C builds of this run.
fn work_dir() -> PathBuf {
    let dir = lib_dir().join("..").join("c_abi");
    std::fs::create_dir_all(&dir).expect("create the C build directory");
    dir
}

fn include_dir() -> PathBuf {
    Path::new(MANIFEST_DIR).join("include")
}

fn c_source(name: &str) -> PathBuf {
    Path::new(MANIFEST_DIR).join("tests/c").join(name)
}

/// The private prefix, installed once per run with `scripts/install`.
fn prefix() -> Result<&'static Path, Failed> {
    static PREFIX: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let result = PREFIX.get_or_init(|| {
        let prefix = work_dir().join("prefix");
        let _ = std::fs::remove_dir_all(&prefix);
        let lib = lib_dir();
        for f in ["libmcapi.so", "libmcapi.a"] {
            if !lib.join(f).exists() {
                return Err(format!("{} missing: build the mcapi crate first", f));
            }
        }
        let script = Path::new(MANIFEST_DIR).join("../scripts/install");
        let out = Command::new(script)
            .arg(&prefix)
            .env("MCAPI_LIB_DIR", &lib)
            .output()
            .map_err(|e| format!("scripts/install: {e}"))?;
        if !out.status.success() {
            return Err(format!("scripts/install failed: {}", text(&out)));
        }
        Ok(prefix)
    });
    result.as_deref().map_err(|e| e.clone().into())
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a command to completion; its output is the error if it fails.
fn run(cmd: &mut Command) -> Result<String, Failed> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed ({}):\n{}", out.status, text(&out)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `pkg-config <args> mcapi` against the private prefix, split into words.
fn pkg_config(args: &[&str]) -> Result<Vec<String>, Failed> {
    let prefix = prefix()?;
    let out = run(Command::new("pkg-config")
        .args(args)
        .arg("mcapi")
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")))?;
    Ok(out.split_whitespace().map(str::to_owned).collect())
}

/// Builds a C (or C++) program against the installed library, the way a user would:
/// `cc src $(pkg-config --cflags --libs mcapi)`, plus an rpath for the private prefix.
fn build(
    compiler: &str,
    flags: &[&str],
    sources: &[PathBuf],
    name: &str,
) -> Result<PathBuf, Failed> {
    let exe = work_dir().join(name);
    let mut cmd = Command::new(compiler);
    cmd.args(flags)
        .args(sources)
        .arg("-o")
        .arg(&exe)
        .args(pkg_config(&["--cflags", "--libs"])?)
        .arg(format!("-Wl,-rpath,{}", prefix()?.join("lib").display()));
    run(&mut cmd)?;
    Ok(exe)
}

/// [`build`] of a program of `tests/c/` with [`C_FLAGS`] and `extra_flags`, once per run:
/// the tests over each provider use the same executable.
fn build_once(source: &str, extra_flags: &[&str], name: &str) -> Result<PathBuf, Failed> {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(exe) = built.get(name) {
        return Ok(exe.clone());
    }
    let mut flags = C_FLAGS.to_vec();
    flags.extend_from_slice(extra_flags);
    let exe = build("cc", &flags, &[c_source(source)], name)?;
    built.insert(name.to_owned(), exe.clone());
    Ok(exe)
}

// ---- the headers against the Rust side ----

/// Every constant the headers define, with the value the Rust side has for it.
fn expected_constants() -> BTreeMap<String, u64> {
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for s in Status::ALL {
        want.insert(s.name().into(), s.code().into());
    }
    want.insert("MCAPI_STATUSCODE_END".into(), STATUSCODE_END.into());
    want.insert(
        "MCAPI_ERR_MSG_LIMIT".into(),
        Status::MCAPI_ERR_MSG_SIZE.code().into(),
    );
    want.insert(
        "MCAPI_ERR_PKT_LIMIT".into(),
        Status::MCAPI_ERR_PKT_SIZE.code().into(),
    );
    for a in EndpointAttribute::ALL {
        want.insert(
            format!("MCAPI_ENDP_ATTR_{}", upper_snake(&format!("{a:?}"))),
            a as u64,
        );
    }
    for (name, value) in capi::MCAPI_ENDP_ATTR_STATUS_FLAGS {
        want.insert(name.into(), value.into());
    }
    let numbers: &[(&str, u64)] = &[
        ("MCAPI_ENDP_ATTR_FIFO_BUFFER", FIFO_BUFFER),
        (
            "MCAPI_ENDP_ATTR_STATE_BUFFER",
            capi::MCAPI_ENDP_ATTR_STATE_BUFFER.into(),
        ),
        ("MCAPI_ENDP_ATTR_LOCAL_MEMORY", LOCAL_MEMORY),
        (
            "MCAPI_ENDP_ATTR_SHARED_MEMORY",
            capi::MCAPI_ENDP_ATTR_SHARED_MEMORY.into(),
        ),
        (
            "MCAPI_ENDP_ATTR_REMOTE_MEMORY",
            capi::MCAPI_ENDP_ATTR_REMOTE_MEMORY.into(),
        ),
        ("MCAPI_NODE_ATTR_TYPE", NODE_ATTR_TYPE.into()),
        ("MCAPI_NODE_ATTR_TYPE_REGULAR", NODE_ATTR_TYPE_REGULAR),
        (
            "MCAPI_NODE_ATTR_MAX_MSG_SIZE",
            NODE_ATTR_MAX_MSG_SIZE.into(),
        ),
        ("MCAPI_NODE_ATTR_EAGER_MAX", NODE_ATTR_EAGER_MAX.into()),
        ("MCAPI_VERSION", capi::MCAPI_VERSION.into()),
        ("MCAPI_ORG_ID", capi::MCAPI_ORG_ID.into()),
        ("MCAPI_IMPL_VERSION", capi::MCAPI_IMPL_VERSION.into()),
        ("MCAPI_MAX_MSG_SIZE", capi::MCAPI_MAX_MSG_SIZE as u64),
        ("MCAPI_MAX_PKT_SIZE", mcapi::MAX_PKT_SIZE as u64),
        ("MCAPI_MAX_PRIORITY", capi::MCAPI_MAX_PRIORITY.into()),
        ("MCAPI_MAX_PRORITY", 0),
        ("MCAPI_MAX_ENDPOINTS", capi::MCAPI_MAX_ENDPOINTS.into()),
        ("MCAPI_BUF_ALIGN", capi::MCAPI_BUF_ALIGN as u64),
        (
            "MCAPI_MAX_STATUS_MSG_LEN",
            capi::MCAPI_MAX_STATUS_MSG_LEN as u64,
        ),
        (
            "MCAPI_MAX_STATUS_SIZE",
            capi::MCAPI_MAX_STATUS_MSG_LEN as u64,
        ),
        ("MCAPI_MAX_REQUESTS", capi::MCAPI_MAX_REQUESTS.into()),
        (
            "MCAPI_MAX_RECV_BUFFERS",
            capi::MCAPI_MAX_RECV_BUFFERS.into(),
        ),
        ("MCAPI_PARAM_MAGIC", capi::MCAPI_PARAM_MAGIC),
        ("MCAPI_COMPAT_SPEC", capi::MCAPI_COMPAT_SPEC.into()),
        ("MCAPI_COMPAT_MCA", capi::MCAPI_COMPAT_MCA.into()),
        ("MCAPI_NODE_ATTR_MAGIC", capi::MCAPI_NODE_ATTR_MAGIC.into()),
        ("MCAPI_PORT_ANY", capi::MCAPI_PORT_ANY.into()),
        (
            "MCAPI_TIMEOUT_INFINITE",
            capi::MCAPI_TIMEOUT_INFINITE.into(),
        ),
        ("MCAPI_INFINITE", capi::MCAPI_TIMEOUT_INFINITE.into()),
        ("MCA_INFINITE", capi::MCAPI_TIMEOUT_INFINITE.into()),
        (
            "MCAPI_TIMEOUT_IMMEDIATE",
            capi::MCAPI_TIMEOUT_IMMEDIATE.into(),
        ),
        ("MCAPI_DOMAIN_INVALID", capi::MCAPI_DOMAIN_INVALID.into()),
        ("MCAPI_NODE_INVALID", capi::MCAPI_NODE_INVALID.into()),
        (
            "MCAPI_RETURN_VALUE_INVALID",
            capi::MCAPI_RETURN_VALUE_INVALID.into(),
        ),
        (
            "MCA_RETURN_VALUE_INVALID",
            capi::MCAPI_RETURN_VALUE_INVALID.into(),
        ),
        ("MCA_TRUE", capi::MCA_TRUE.into()),
        ("MCAPI_TRUE", capi::MCA_TRUE.into()),
        ("MCA_FALSE", capi::MCA_FALSE.into()),
        ("MCAPI_FALSE", capi::MCA_FALSE.into()),
        ("MCA_NULL", capi::MCAPI_NULL),
        ("MCAPI_NULL", capi::MCAPI_NULL),
        // Types: sizes as the Rust side declares them.
        (
            "sizeof(mcapi_endpoint_t)",
            size_of::<capi::mcapi_endpoint_t>() as u64,
        ),
        (
            "sizeof(mcapi_request_t)",
            size_of::<capi::mcapi_request_t>() as u64,
        ),
        (
            "sizeof(mcapi_status_t)",
            size_of::<capi::mcapi_status_t>() as u64,
        ),
        (
            "sizeof(mcapi_timeout_t)",
            size_of::<capi::mcapi_timeout_t>() as u64,
        ),
        (
            "sizeof(mcapi_boolean_t)",
            size_of::<capi::mcapi_boolean_t>() as u64,
        ),
        (
            "sizeof(mcapi_priority_t)",
            size_of::<capi::mcapi_priority_t>() as u64,
        ),
    ];
    for &(name, value) in numbers {
        want.insert(name.into(), value);
    }
    let more_sizes: &[(&str, usize)] = &[
        ("sizeof(mcapi_domain_t)", size_of::<capi::mcapi_domain_t>()),
        ("sizeof(mcapi_node_t)", size_of::<capi::mcapi_node_t>()),
        ("sizeof(mcapi_port_t)", size_of::<capi::mcapi_port_t>()),
        ("sizeof(mcapi_uint_t)", size_of::<capi::mcapi_uint_t>()),
        (
            "sizeof(mcapi_pktchan_recv_hndl_t)",
            size_of::<capi::mcapi_pktchan_recv_hndl_t>(),
        ),
        (
            "sizeof(mcapi_pktchan_send_hndl_t)",
            size_of::<capi::mcapi_pktchan_send_hndl_t>(),
        ),
        (
            "sizeof(mcapi_sclchan_recv_hndl_t)",
            size_of::<capi::mcapi_sclchan_recv_hndl_t>(),
        ),
        (
            "sizeof(mcapi_sclchan_send_hndl_t)",
            size_of::<capi::mcapi_sclchan_send_hndl_t>(),
        ),
    ];
    for &(name, value) in more_sizes {
        want.insert(name.into(), value as u64);
    }
    // Struct layouts, field by field.
    let layouts: &[(&str, usize)] = &[
        ("sizeof(mcapi_param_t)", size_of::<mcapi_param_t>()),
        (
            "offsetof(mcapi_param_t, magic)",
            offset_of!(mcapi_param_t, magic),
        ),
        (
            "offsetof(mcapi_param_t, request_table_size)",
            offset_of!(mcapi_param_t, request_table_size),
        ),
        (
            "offsetof(mcapi_param_t, recv_buffers)",
            offset_of!(mcapi_param_t, recv_buffers),
        ),
        (
            "offsetof(mcapi_param_t, provider)",
            offset_of!(mcapi_param_t, provider),
        ),
        (
            "offsetof(mcapi_param_t, job)",
            offset_of!(mcapi_param_t, job),
        ),
        (
            "offsetof(mcapi_param_t, topology)",
            offset_of!(mcapi_param_t, topology),
        ),
        (
            "offsetof(mcapi_param_t, max_msg_size)",
            offset_of!(mcapi_param_t, max_msg_size),
        ),
        (
            "offsetof(mcapi_param_t, eager_max)",
            offset_of!(mcapi_param_t, eager_max),
        ),
        (
            "offsetof(mcapi_param_t, reserved)",
            offset_of!(mcapi_param_t, reserved),
        ),
        ("sizeof(mcapi_info_t)", size_of::<mcapi_info_t>()),
        (
            "offsetof(mcapi_info_t, mcapi_version)",
            offset_of!(mcapi_info_t, mcapi_version),
        ),
        (
            "offsetof(mcapi_info_t, organization_id)",
            offset_of!(mcapi_info_t, organization_id),
        ),
        (
            "offsetof(mcapi_info_t, implementation_version)",
            offset_of!(mcapi_info_t, implementation_version),
        ),
        (
            "offsetof(mcapi_info_t, number_of_domains)",
            offset_of!(mcapi_info_t, number_of_domains),
        ),
        (
            "offsetof(mcapi_info_t, number_of_nodes)",
            offset_of!(mcapi_info_t, number_of_nodes),
        ),
        (
            "offsetof(mcapi_info_t, number_of_ports)",
            offset_of!(mcapi_info_t, number_of_ports),
        ),
        (
            "sizeof(mcapi_node_attributes_t)",
            size_of::<mcapi_node_attributes_t>(),
        ),
        (
            "offsetof(mcapi_node_attributes_t, magic)",
            offset_of!(mcapi_node_attributes_t, magic),
        ),
        (
            "offsetof(mcapi_node_attributes_t, node_type)",
            offset_of!(mcapi_node_attributes_t, node_type),
        ),
        (
            "offsetof(mcapi_node_attributes_t, reserved)",
            offset_of!(mcapi_node_attributes_t, reserved),
        ),
        (
            "sizeof(mcapi_endp_attr_max_payload_size_t)",
            EndpointAttribute::MaxPayloadSize.c_size(),
        ),
    ];
    for &(name, value) in layouts {
        want.insert(name.into(), value as u64);
    }
    want
}

/// `MaxPayloadSize` -> `MAX_PAYLOAD_SIZE`.
fn upper_snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Names the headers define (`#define NAME` and enumerators `NAME = `), except those that
/// are no numbers.
fn header_constant_names() -> Result<BTreeSet<String>, Failed> {
    const NOT_NUMBERS: &[&str] = &[
        "MCA_H",
        "MCAPI_H",
        "MCAPI_IMPL_SPEC_H",
        "MCA_IN",
        "MCA_OUT",
        "MCAPI_IN",
        "MCAPI_OUT",
        "MCAPI_DECL_ALIGNED",
    ];
    let mut names = BTreeSet::new();
    for header in ["mca.h", "mcapi.h", "mcapi_impl_spec.h"] {
        let source = std::fs::read_to_string(include_dir().join(header))?;
        for line in source.lines().map(str::trim) {
            let name = match line.strip_prefix("#define ") {
                Some(rest) => rest.split_whitespace().next(),
                None if line.starts_with("MCA") && line.contains(" = ") => {
                    line.split_whitespace().next()
                }
                None => None,
            };
            if let Some(name) = name.filter(|n| !NOT_NUMBERS.contains(n)) {
                names.insert(name.to_owned());
            }
        }
    }
    Ok(names)
}

fn constants_match() -> Result<(), Failed> {
    let want = expected_constants();
    let defined = header_constant_names()?;
    let unchecked: Vec<_> = defined
        .iter()
        .filter(|n| !want.contains_key(n.as_str()))
        .collect();
    if !unchecked.is_empty() {
        return Err(format!("header constants with no Rust counterpart: {unchecked:?}").into());
    }
    let mut program = String::from(
        "#include <mcapi.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
    );
    for name in want.keys() {
        program.push_str(&format!(
            "    printf(\"%s %llu\\n\", \"{name}\", (unsigned long long)({name}));\n"
        ));
    }
    program.push_str("    return 0;\n}\n");
    let source = work_dir().join("constants.c");
    std::fs::write(&source, program)?;
    let exe = build("cc", C_FLAGS, &[source], "constants")?;
    let out = run(&mut Command::new(exe))?;
    let mut wrong = Vec::new();
    for line in out.lines() {
        let (name, value) = line.rsplit_once(' ').ok_or("malformed output")?;
        let value: u64 = value.parse()?;
        if want[name] != value {
            wrong.push(format!("{name}: header {value}, Rust {}", want[name]));
        }
    }
    if !wrong.is_empty() {
        return Err(format!("header and Rust disagree:\n{}", wrong.join("\n")).into());
    }
    Ok(())
}

/// One table of every exported function: its C type as the headers must declare it, and the
/// Rust type it must have. rustc checks the Rust column here; the C compiler checks the C
/// column against the headers in [`signatures_match`].
macro_rules! signatures {
    ($( $name:ident: $c_ret:literal ($c_params:literal) = fn($($rust:ty),*) $(-> $rust_ret:ty)?; )*) => {
        #[allow(dead_code)]
        fn rust_signatures() {
            use capi::*;
            use std::ffi::{c_char, c_void};
            $( let _: unsafe extern "C" fn($($rust),*) $(-> $rust_ret)? = $name; )*
        }
        const SIGNATURES: &[(&str, &str, &str)] = &[ $( (stringify!($name), $c_ret, $c_params), )* ];
    };
}

signatures! {
    mcapi_initialize: "void" ("mcapi_domain_t, mcapi_node_t, const mcapi_node_attributes_t*, const mcapi_param_t*, mcapi_info_t*, mcapi_status_t*")
        = fn(u32, u32, *const mcapi_node_attributes_t, *const mcapi_param_t, *mut mcapi_info_t, *mut u32);
    mcapi_param_init: "void" ("mcapi_param_t*, mcapi_status_t*") = fn(*mut mcapi_param_t, *mut u32);
    mcapi_ext_launcher_rank: "mcapi_uint_t" ("mcapi_status_t*") = fn(*mut u32) -> u32;
    mcapi_ext_launcher_size: "mcapi_uint_t" ("mcapi_status_t*") = fn(*mut u32) -> u32;
    mcapi_finalize: "void" ("mcapi_status_t*") = fn(*mut u32);
    mcapi_domain_id_get: "mcapi_domain_t" ("mcapi_status_t*") = fn(*mut u32) -> u32;
    mcapi_node_id_get: "mcapi_node_t" ("mcapi_status_t*") = fn(*mut u32) -> u32;
    mcapi_node_init_attributes: "void" ("mcapi_node_attributes_t*, mcapi_status_t*")
        = fn(*mut mcapi_node_attributes_t, *mut u32);
    mcapi_node_set_attribute: "void" ("mcapi_node_attributes_t*, mcapi_uint_t, const void*, size_t, mcapi_status_t*")
        = fn(*mut mcapi_node_attributes_t, u32, *const c_void, usize, *mut u32);
    mcapi_node_get_attribute: "void" ("mcapi_domain_t, mcapi_node_t, mcapi_uint_t, void*, size_t, mcapi_status_t*")
        = fn(u32, u32, u32, *mut c_void, usize, *mut u32);
    mcapi_endpoint_create: "mcapi_endpoint_t" ("mcapi_port_t, mcapi_status_t*") = fn(u32, *mut u32) -> u64;
    mcapi_endpoint_get_i: "void" ("mcapi_domain_t, mcapi_node_t, mcapi_port_t, mcapi_endpoint_t*, mcapi_request_t*, mcapi_status_t*")
        = fn(u32, u32, u32, *mut u64, *mut u64, *mut u32);
    mcapi_endpoint_get: "mcapi_endpoint_t" ("mcapi_domain_t, mcapi_node_t, mcapi_port_t, mcapi_timeout_t, mcapi_status_t*")
        = fn(u32, u32, u32, u32, *mut u32) -> u64;
    mcapi_endpoint_delete: "void" ("mcapi_endpoint_t, mcapi_status_t*") = fn(u64, *mut u32);
    mcapi_endpoint_get_attribute: "void" ("mcapi_endpoint_t, mcapi_uint_t, void*, size_t, mcapi_status_t*")
        = fn(u64, u32, *mut c_void, usize, *mut u32);
    mcapi_endpoint_set_attribute: "void" ("mcapi_endpoint_t, mcapi_uint_t, const void*, size_t, mcapi_status_t*")
        = fn(u64, u32, *const c_void, usize, *mut u32);
    mcapi_msg_send_i: "void" ("mcapi_endpoint_t, mcapi_endpoint_t, const void*, size_t, mcapi_priority_t, mcapi_request_t*, mcapi_status_t*")
        = fn(u64, u64, *const c_void, usize, u32, *mut u64, *mut u32);
    mcapi_msg_send: "void" ("mcapi_endpoint_t, mcapi_endpoint_t, const void*, size_t, mcapi_priority_t, mcapi_status_t*")
        = fn(u64, u64, *const c_void, usize, u32, *mut u32);
    mcapi_msg_recv_i: "void" ("mcapi_endpoint_t, void*, size_t, mcapi_request_t*, mcapi_status_t*")
        = fn(u64, *mut c_void, usize, *mut u64, *mut u32);
    mcapi_msg_recv: "void" ("mcapi_endpoint_t, void*, size_t, size_t*, mcapi_status_t*")
        = fn(u64, *mut c_void, usize, *mut usize, *mut u32);
    mcapi_msg_available: "mcapi_uint_t" ("mcapi_endpoint_t, mcapi_status_t*") = fn(u64, *mut u32) -> u32;
    mcapi_pktchan_connect_i: "void" ("mcapi_endpoint_t, mcapi_endpoint_t, mcapi_request_t*, mcapi_status_t*")
        = fn(u64, u64, *mut u64, *mut u32);
    mcapi_pktchan_recv_open_i: "void" ("mcapi_pktchan_recv_hndl_t*, mcapi_endpoint_t, mcapi_request_t*, mcapi_status_t*")
        = fn(*mut mcapi_pktchan_recv_hndl_t, u64, *mut u64, *mut u32);
    mcapi_pktchan_send_open_i: "void" ("mcapi_pktchan_send_hndl_t*, mcapi_endpoint_t, mcapi_request_t*, mcapi_status_t*")
        = fn(*mut mcapi_pktchan_send_hndl_t, u64, *mut u64, *mut u32);
    mcapi_pktchan_send_i: "void" ("mcapi_pktchan_send_hndl_t, const void*, size_t, mcapi_request_t*, mcapi_status_t*")
        = fn(mcapi_pktchan_send_hndl_t, *const c_void, usize, *mut u64, *mut u32);
    mcapi_pktchan_send: "void" ("mcapi_pktchan_send_hndl_t, const void*, size_t, mcapi_status_t*")
        = fn(mcapi_pktchan_send_hndl_t, *const c_void, usize, *mut u32);
    mcapi_pktchan_recv_i: "void" ("mcapi_pktchan_recv_hndl_t, void**, mcapi_request_t*, mcapi_status_t*")
        = fn(mcapi_pktchan_recv_hndl_t, *mut *mut c_void, *mut u64, *mut u32);
    mcapi_pktchan_recv: "void" ("mcapi_pktchan_recv_hndl_t, void**, size_t*, mcapi_status_t*")
        = fn(mcapi_pktchan_recv_hndl_t, *mut *mut c_void, *mut usize, *mut u32);
    mcapi_pktchan_available: "mcapi_uint_t" ("mcapi_pktchan_recv_hndl_t, mcapi_status_t*")
        = fn(mcapi_pktchan_recv_hndl_t, *mut u32) -> u32;
    mcapi_pktchan_release: "void" ("void*, mcapi_status_t*") = fn(*mut c_void, *mut u32);
    mcapi_pktchan_release_test: "mcapi_boolean_t" ("void*, mcapi_status_t*") = fn(*mut c_void, *mut u32) -> u8;
    mcapi_pktchan_recv_close_i: "void" ("mcapi_pktchan_recv_hndl_t, mcapi_request_t*, mcapi_status_t*")
        = fn(mcapi_pktchan_recv_hndl_t, *mut u64, *mut u32);
    mcapi_pktchan_send_close_i: "void" ("mcapi_pktchan_send_hndl_t, mcapi_request_t*, mcapi_status_t*")
        = fn(mcapi_pktchan_send_hndl_t, *mut u64, *mut u32);
    mcapi_sclchan_connect_i: "void" ("mcapi_endpoint_t, mcapi_endpoint_t, mcapi_request_t*, mcapi_status_t*")
        = fn(u64, u64, *mut u64, *mut u32);
    mcapi_sclchan_recv_open_i: "void" ("mcapi_sclchan_recv_hndl_t*, mcapi_endpoint_t, mcapi_request_t*, mcapi_status_t*")
        = fn(*mut mcapi_sclchan_recv_hndl_t, u64, *mut u64, *mut u32);
    mcapi_sclchan_send_open_i: "void" ("mcapi_sclchan_send_hndl_t*, mcapi_endpoint_t, mcapi_request_t*, mcapi_status_t*")
        = fn(*mut mcapi_sclchan_send_hndl_t, u64, *mut u64, *mut u32);
    mcapi_sclchan_send_uint64: "void" ("mcapi_sclchan_send_hndl_t, mcapi_uint64_t, mcapi_status_t*")
        = fn(mcapi_sclchan_send_hndl_t, u64, *mut u32);
    mcapi_sclchan_send_uint32: "void" ("mcapi_sclchan_send_hndl_t, mcapi_uint32_t, mcapi_status_t*")
        = fn(mcapi_sclchan_send_hndl_t, u32, *mut u32);
    mcapi_sclchan_send_uint16: "void" ("mcapi_sclchan_send_hndl_t, mcapi_uint16_t, mcapi_status_t*")
        = fn(mcapi_sclchan_send_hndl_t, u16, *mut u32);
    mcapi_sclchan_send_uint8: "void" ("mcapi_sclchan_send_hndl_t, mcapi_uint8_t, mcapi_status_t*")
        = fn(mcapi_sclchan_send_hndl_t, u8, *mut u32);
    mcapi_sclchan_recv_uint64: "mcapi_uint64_t" ("mcapi_sclchan_recv_hndl_t, mcapi_status_t*")
        = fn(mcapi_sclchan_recv_hndl_t, *mut u32) -> u64;
    mcapi_sclchan_recv_uint32: "mcapi_uint32_t" ("mcapi_sclchan_recv_hndl_t, mcapi_status_t*")
        = fn(mcapi_sclchan_recv_hndl_t, *mut u32) -> u32;
    mcapi_sclchan_recv_uint16: "mcapi_uint16_t" ("mcapi_sclchan_recv_hndl_t, mcapi_status_t*")
        = fn(mcapi_sclchan_recv_hndl_t, *mut u32) -> u16;
    mcapi_sclchan_recv_uint8: "mcapi_uint8_t" ("mcapi_sclchan_recv_hndl_t, mcapi_status_t*")
        = fn(mcapi_sclchan_recv_hndl_t, *mut u32) -> u8;
    mcapi_sclchan_available: "mcapi_uint_t" ("mcapi_sclchan_recv_hndl_t, mcapi_status_t*")
        = fn(mcapi_sclchan_recv_hndl_t, *mut u32) -> u32;
    mcapi_sclchan_recv_close_i: "void" ("mcapi_sclchan_recv_hndl_t, mcapi_request_t*, mcapi_status_t*")
        = fn(mcapi_sclchan_recv_hndl_t, *mut u64, *mut u32);
    mcapi_sclchan_send_close_i: "void" ("mcapi_sclchan_send_hndl_t, mcapi_request_t*, mcapi_status_t*")
        = fn(mcapi_sclchan_send_hndl_t, *mut u64, *mut u32);
    mcapi_test: "mcapi_boolean_t" ("mcapi_request_t*, size_t*, mcapi_status_t*")
        = fn(*mut u64, *mut usize, *mut u32) -> u8;
    mcapi_wait: "mcapi_boolean_t" ("const mcapi_request_t*, size_t*, mcapi_timeout_t, mcapi_status_t*")
        = fn(*mut u64, *mut usize, u32, *mut u32) -> u8;
    mcapi_wait_any: "mcapi_uint_t" ("size_t, mcapi_request_t**, size_t*, mcapi_timeout_t, mcapi_status_t*")
        = fn(usize, *mut *mut u64, *mut usize, u32, *mut u32) -> u32;
    mcapi_cancel: "void" ("mcapi_request_t*, mcapi_status_t*") = fn(*mut u64, *mut u32);
    mcapi_display_status: "char*" ("mcapi_status_t, char*, size_t") = fn(u32, *mut c_char, usize) -> *mut c_char;
    mcapi_set_debug_level: "void" ("int") = fn(std::ffi::c_int);
    mca_set_debug_level: "void" ("int") = fn(std::ffi::c_int);
    mcapi_display_state: "void" ("void*") = fn(*mut c_void);
}

/// Function names the headers declare.
fn header_functions() -> Result<BTreeSet<String>, Failed> {
    let mut names = BTreeSet::new();
    for header in ["mca.h", "mcapi.h", "mcapi_impl_spec.h"] {
        let source = std::fs::read_to_string(include_dir().join(header))?;
        for line in source.lines().filter(|l| !l.starts_with([' ', '#', '/'])) {
            if let Some(open) = line.find('(') {
                if let Some(name) = line[..open].split_whitespace().last() {
                    let name = name.trim_start_matches('*');
                    if name.starts_with("mcapi_") || name.starts_with("mca_") {
                        names.insert(name.to_owned());
                    }
                }
            }
        }
    }
    Ok(names)
}

/// Dynamic symbols `libmcapi.so` defines.
fn exported_symbols() -> Result<BTreeSet<String>, Failed> {
    let out = run(Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib_dir().join("libmcapi.so")))?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let (_, kind, name) = (fields.next()?, fields.next()?, fields.next()?);
            // The version node (type A) names no code.
            (kind != "A").then(|| name.split('@').next().unwrap_or(name).to_owned())
        })
        .collect())
}

fn signatures_match() -> Result<(), Failed> {
    let table: BTreeSet<String> = SIGNATURES.iter().map(|(n, _, _)| n.to_string()).collect();
    let declared = header_functions()?;
    let exported = exported_symbols()?;
    if declared != table || exported != table {
        return Err(format!(
            "function sets differ:\n  headers: {declared:?}\n  exports: {exported:?}\n  table:   {table:?}"
        )
        .into());
    }
    let mut program = String::from("#include <mcapi.h>\n");
    for (name, ret, params) in SIGNATURES {
        program.push_str(&format!("{ret} (*check_{name})({params}) = {name};\n"));
    }
    program.push_str("int main(void) { return 0; }\n");
    let source = work_dir().join("signatures.c");
    std::fs::write(&source, program)?;
    build("cc", C_FLAGS, &[source], "signatures")?;
    Ok(())
}

fn compile_as_cxx() -> Result<(), Failed> {
    let flags = ["-std=c++11", "-Wall", "-Wextra", "-pedantic", "-Werror"];
    let exe = build("c++", &flags, &[c_source("headers.cpp")], "headers_cxx")?;
    let out = run(&mut Command::new(exe))?;
    if !out.contains("MCAPI_ERR_REQUEST_CANCELLED") {
        return Err(format!("unexpected output: {out}").into());
    }
    Ok(())
}

fn soname_and_exports() -> Result<(), Failed> {
    let lib = lib_dir().join("libmcapi.so");
    let dynamic = run(Command::new("readelf").arg("-d").arg(&lib))?;
    if !dynamic.contains("Library soname: [libmcapi.so.2]") {
        return Err(format!("no soname libmcapi.so.2:\n{dynamic}").into());
    }
    let foreign: Vec<String> = exported_symbols()?
        .into_iter()
        .filter(|s| !s.starts_with("mcapi_") && !s.starts_with("mca_"))
        .collect();
    if !foreign.is_empty() {
        return Err(format!("exported beyond mcapi_*/mca_*: {foreign:?}").into());
    }
    Ok(())
}

/// `cc app.c $(pkg-config --cflags --libs mcapi)` runs; so does a static link through
/// `pkg-config --static` with libmcapi.a.
fn pkg_config_programs() -> Result<(), Failed> {
    let job = format!("c-app-{}", std::process::id());
    let shared = build("cc", C_FLAGS, &[c_source("app.c")], "app_shared")?;
    let out = run(Command::new(&shared)
        .env("MCAPI_JOB", &job)
        .env("MCAPI_PROVIDER", "shm"))?;
    if !out.contains(": ok") {
        return Err(format!("app said {out:?}").into());
    }
    let static_exe = work_dir().join("app_static");
    let libs: Vec<String> = pkg_config(&["--static", "--libs"])?
        .into_iter()
        .map(|w| {
            if w == "-lmcapi" {
                "-l:libmcapi.a".to_owned()
            } else {
                w
            }
        })
        .collect();
    run(Command::new("cc")
        .args(C_FLAGS)
        .arg(c_source("app.c"))
        .arg("-o")
        .arg(&static_exe)
        .args(pkg_config(&["--cflags"])?)
        .args(libs))?;
    let needed = run(Command::new("readelf").arg("-d").arg(&static_exe))?;
    if needed.contains("libmcapi") {
        return Err("the static build still needs libmcapi.so".into());
    }
    let out = run(Command::new(&static_exe)
        .env("MCAPI_JOB", &job)
        .env("MCAPI_PROVIDER", "shm"))?;
    if !out.contains(": ok") {
        return Err(format!("static app said {out:?}").into());
    }
    Ok(())
}

// ---- C programs as processes ----

/// Processes of one C test; killed (and their shm regions removed) if the test fails.
struct Processes {
    children: Vec<(String, Child)>,
}

impl Processes {
    fn spawn(
        &mut self,
        exe: &Path,
        args: &[&str],
        provider: &str,
        job: &str,
        env: &[(&str, &str)],
    ) -> Result<(), Failed> {
        let child = Command::new(exe)
            .args(args)
            .env("MCAPI_PROVIDER", provider)
            .env("MCAPI_JOB", job)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        self.children.push((args.join(" "), child));
        Ok(())
    }

    /// Waits for every process; all must exit 0 within `limit`. Once one fails, the others
    /// are stopped at once (a peer waiting for it would otherwise hold the test to `limit`).
    fn wait_all(mut self, limit: Duration) -> Result<String, Failed> {
        let deadline = Instant::now() + limit;
        let mut statuses = vec![None; self.children.len()];
        loop {
            for ((_, child), status) in self.children.iter_mut().zip(&mut statuses) {
                if status.is_none() {
                    *status = child.try_wait()?;
                }
            }
            let one_failed = statuses.iter().flatten().any(|s| !s.success());
            if statuses.iter().all(Option::is_some) || one_failed || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut report = String::new();
        for ((name, child), status) in self.children.iter_mut().zip(&statuses) {
            if status.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let out = read_all(child);
            report.push_str(&format!("[{name}] {status:?}\n{out}"));
        }
        let failed = !statuses.iter().all(|s| s.is_some_and(|s| s.success()));
        let pids: Vec<u32> = self.children.iter().map(|(_, c)| c.id()).collect();
        self.children.clear();
        if failed {
            for pid in pids {
                mcapi_ofi::cleanup::remove_shm_regions(pid);
            }
            return Err(format!("C processes failed:\n{report}").into());
        }
        Ok(report)
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
            mcapi_ofi::cleanup::remove_shm_regions(child.id());
        }
    }
}

fn read_all(child: &mut Child) -> String {
    use std::io::Read;
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut text);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    text
}

/// A C program whose `mcapi_initialize` fails (an unknown provider) is told why on stderr
/// without asking (`MCAPI_LOG` unset: errors only); `MCAPI_LOG=off` silences it. Before, it
/// failed with `MCAPI_ERR_NODE_INITFAILED` and printed nothing unless `MCAPI_LOG` was set.
fn failed_initialize_says_why() -> Result<(), Failed> {
    let exe = build_once("app.c", &[], "app")?;
    let run = |log: Option<&str>| -> Result<std::process::Output, Failed> {
        let mut cmd = Command::new(&exe);
        cmd.env("MCAPI_PROVIDER", "nosuchprovider")
            .env("MCAPI_JOB", format!("c-init-fails-{}", std::process::id()))
            .env_remove("MCAPI_LOG");
        if let Some(level) = log {
            cmd.env("MCAPI_LOG", level);
        }
        Ok(cmd.output()?)
    };
    let out = run(None)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success()
        || !stderr.contains("initialize failed")
        || !stderr.contains("nosuchprovider")
    {
        return Err(format!("by default: {:?}, stderr {stderr:?}", out.status).into());
    }
    let out = run(Some("off"))?;
    if out.status.success() || !out.stderr.is_empty() {
        return Err(format!(
            "MCAPI_LOG=off: {:?}, stderr {:?}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

/// The C suite (`tests/c/suite.c`): the echo process and the checking process.
/// The sanitizers of the C tests built with them.
const SANITIZERS: &[&str] = &[
    "-fsanitize=address,undefined",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=all",
];

/// Seeded random calls of the whole API (`tests/c/random_calls.c`: garbage handles, NULLs,
/// absurd sizes, short timeouts, before initialize and after finalize), three seeds of a few
/// thousand calls: every call returns a status, and a message still round-trips afterwards.
fn random_calls(provider: &str, extra_flags: &[&str]) -> Result<(), Failed> {
    let name = if extra_flags.is_empty() {
        "random_calls"
    } else {
        "random_calls_sanitized"
    };
    let exe = build_once("random_calls.c", extra_flags, name)?;
    // Few receive buffers: the random creates must not exhaust shm's receive queue before
    // the health check's endpoints.
    let env = [
        ("ASAN_OPTIONS", "detect_leaks=0"),
        ("UBSAN_OPTIONS", "print_stacktrace=1"),
        ("MCAPI_RECV_BUFFERS", "8"),
    ];
    for seed in ["1", "7", "2026"] {
        let job = format!("c-{name}-{provider}-{seed}-{}", std::process::id());
        let mut processes = Processes {
            children: Vec::new(),
        };
        processes.spawn(&exe, &[seed, "3000"], provider, &job, &env)?;
        let report = processes.wait_all(Duration::from_secs(120))?;
        if !report.contains("health check passed") {
            return Err(format!("seed {seed}: the calls did not finish:\n{report}").into());
        }
    }
    Ok(())
}

fn c_suite(provider: &str, extra_flags: &[&str]) -> Result<(), Failed> {
    let name = if extra_flags.is_empty() {
        "suite"
    } else {
        "suite_sanitized"
    };
    let exe = build_once("suite.c", extra_flags, name)?;
    let job = format!("c-{name}-{provider}-{}", std::process::id());
    // The sanitizers report to stderr and fail the process; leak checking is off because
    // libfabric's providers keep allocations until exit by design.
    let env = [
        ("ASAN_OPTIONS", "detect_leaks=0"),
        ("UBSAN_OPTIONS", "print_stacktrace=1"),
    ];
    let mut processes = Processes {
        children: Vec::new(),
    };
    processes.spawn(&exe, &["echo"], provider, &job, &env)?;
    processes.spawn(&exe, &["main"], provider, &job, &env)?;
    let report = processes.wait_all(Duration::from_secs(120))?;
    if !report.contains("all checks passed") {
        return Err(format!("the suite did not finish:\n{report}").into());
    }
    Ok(())
}

/// The two modes (`tests/c/compat.c`): the spec's and `MCAPI_COMPAT=mca`'s reading of
/// `_i` calls refused at once and of `test`/`wait`/`wait_any`, the mode chosen by
/// `mcapi_param_t.compat` and by the environment.
fn compat_modes(provider: &str) -> Result<(), Failed> {
    let exe = build_once("compat.c", &[], "compat")?;
    for (mode, from, env) in [
        ("spec", "param", None),
        ("mca", "param", None),
        ("mca", "env", Some("mca")),
        ("spec", "env", Some("spec")),
    ] {
        let job = format!("c-compat-{provider}-{mode}-{from}-{}", std::process::id());
        let env: Vec<(&str, &str)> = env.map(|v| ("MCAPI_COMPAT", v)).into_iter().collect();
        let mut processes = Processes {
            children: Vec::new(),
        };
        processes.spawn(&exe, &[mode, from], provider, &job, &env)?;
        let report = processes.wait_all(Duration::from_secs(60))?;
        if !report.contains(&format!("compat {mode} {from}: all checks passed")) {
            return Err(format!("compat {mode} {from} did not finish:\n{report}").into());
        }
    }
    Ok(())
}

/// The codes chapter 4's ERRORS tables leave a choice of (`tests/c/errors.c`): handles
/// after delete and close, attribute numbers, tiny timeouts, channel calls of the wrong
/// type or direction, connects with gets pending; the same in both modes.
fn error_codes(provider: &str) -> Result<(), Failed> {
    let exe = build_once("errors.c", &[], "errors")?;
    for mode in ["spec", "mca"] {
        let job = format!("c-errors-{provider}-{mode}-{}", std::process::id());
        let mut processes = Processes {
            children: Vec::new(),
        };
        processes.spawn(&exe, &[], provider, &job, &[("MCAPI_COMPAT", mode)])?;
        let report = processes.wait_all(Duration::from_secs(60))?;
        if !report.contains("errors: all checks passed") {
            return Err(format!("errors ({mode}) did not finish:\n{report}").into());
        }
    }
    Ok(())
}

/// A program in the style of the MCA reference implementation's tests
/// (`tests/c/mca_style.c`), unchanged, under `MCAPI_COMPAT=mca`: failed sends polled with
/// `while (!mcapi_test(...))`, errors reported through requests, the reference's debug
/// helpers.
fn mca_style_program(provider: &str) -> Result<(), Failed> {
    let exe = build_once("mca_style.c", &["-DFILL_UNTIL_MEM_LIMIT=1"], "mca_style")?;
    let job = format!("c-mca-style-{provider}-{}", std::process::id());
    let mut processes = Processes {
        children: Vec::new(),
    };
    processes.spawn(&exe, &[], provider, &job, &[("MCAPI_COMPAT", "mca")])?;
    let report = processes.wait_all(Duration::from_secs(60))?;
    if !report.contains("mca_style: Test PASSED") {
        return Err(format!("mca_style did not finish:\n{report}").into());
    }
    Ok(())
}

/// The configured maximum message size and eager threshold (`tests/c/max_msg.c`): set by
/// `mcapi_param_t`, read as node attributes of this node and of another, enforced; bad
/// parameter blocks refused.
fn max_msg(provider: &str) -> Result<(), Failed> {
    let exe = build_once("max_msg.c", &[], "max_msg")?;
    let job = format!("c-max-msg-{provider}-{}", std::process::id());
    let mut processes = Processes {
        children: Vec::new(),
    };
    processes.spawn(&exe, &["params"], provider, &job, &[])?;
    let report = processes.wait_all(Duration::from_secs(60))?;
    if !report.contains("max_msg params: all checks passed") {
        return Err(format!("max_msg params did not finish:\n{report}").into());
    }
    let job = format!("{job}-pair");
    let mut processes = Processes {
        children: Vec::new(),
    };
    processes.spawn(&exe, &["small"], provider, &job, &[])?;
    processes.spawn(&exe, &["big"], provider, &job, &[])?;
    let report = processes.wait_all(Duration::from_secs(120))?;
    for role in ["small", "big"] {
        if !report.contains(&format!("max_msg {role}: all checks passed")) {
            return Err(format!("max_msg {role} did not finish:\n{report}").into());
        }
    }
    Ok(())
}

/// Issue 22 section 1 (`tests/c/same_node_msg.c`): one node, one thread, messages between
/// its own endpoints complete at once; in spec and in compatibility mode.
fn same_node_msg(provider: &str) -> Result<(), Failed> {
    let exe = build_once("same_node_msg.c", &[], "same_node_msg")?;
    for mode in ["spec", "mca"] {
        let job = format!("c-same-node-msg-{mode}-{provider}-{}", std::process::id());
        let mut processes = Processes {
            children: Vec::new(),
        };
        processes.spawn(&exe, &[], provider, &job, &[("MCAPI_COMPAT", mode)])?;
        let report = processes.wait_all(Duration::from_secs(60))?;
        if !report.contains("all checks passed") {
            return Err(format!("{mode} mode did not finish:\n{report}").into());
        }
    }
    Ok(())
}

/// Packet and scalar channels with both sides in one node, driven by one thread
/// (`tests/c/same_node_chan.c`), in compat mode `compat` (`MCAPI_COMPAT`).
fn same_node_chan(provider: &str, compat: &str) -> Result<(), Failed> {
    let exe = build_once("same_node_chan.c", &[], "same_node_chan")?;
    let job = format!(
        "c-same-node-chan-{provider}-{compat}-{}",
        std::process::id()
    );
    let mut processes = Processes {
        children: Vec::new(),
    };
    processes.spawn(&exe, &["3"], provider, &job, &[("MCAPI_COMPAT", compat)])?;
    let report = processes.wait_all(Duration::from_secs(60))?;
    if !report.contains("same-node channels: all checks passed") {
        return Err(format!("the program did not finish:\n{report}").into());
    }
    Ok(())
}

/// Spec 7.2 (`tests/c/example_7_2.c`): a root and four workers, five processes, the workers
/// started first so that all of them contact the root at once.
fn example_7_2(provider: &str) -> Result<(), Failed> {
    const WORKERS: u32 = 4;
    let exe = build_once("example_7_2.c", &[], "example_7_2")?;
    let job = format!("c-7.2-{provider}-{}", std::process::id());
    let mut processes = Processes {
        children: Vec::new(),
    };
    // Workers first: their endpoint_get waits for the root.
    for node in 1..=WORKERS {
        processes.spawn(&exe, &["worker", &node.to_string()], provider, &job, &[])?;
    }
    processes.spawn(&exe, &["root", &WORKERS.to_string()], provider, &job, &[])?;
    let report = processes.wait_all(Duration::from_secs(60))?;
    if !report.contains(&format!("{WORKERS} workers discovered each other")) {
        return Err(format!("the root did not finish:\n{report}").into());
    }
    Ok(())
}

/// Runs a chapter-7 example: one process per argument list, each a node, all in one job;
/// all must exit 0 within a minute, and `done` must appear in what they print.
fn run_example(
    provider: &str,
    example: &str,
    processes: &[Vec<String>],
    done: &str,
) -> Result<(), Failed> {
    let exe = build_once(&format!("{example}.c"), &[], example)?;
    let job = format!("c-{example}-{provider}-{}", std::process::id());
    let mut running = Processes {
        children: Vec::new(),
    };
    for args in processes {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        running.spawn(&exe, &args, provider, &job, &[])?;
    }
    let report = running.wait_all(Duration::from_secs(60))?;
    if !report.contains(done) {
        return Err(format!("{example} did not finish:\n{report}").into());
    }
    Ok(())
}

fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// Spec 7.1 (`tests/c/example_7_1.c`): a third node connects the packet channel between a
/// sender and a receiver it knows by their static tuples; 100 packets go through.
fn example_7_1(provider: &str) -> Result<(), Failed> {
    run_example(
        provider,
        "example_7_1",
        &[
            args(&["receiver", "100"]),
            args(&["sender", "100"]),
            args(&["third"]),
        ],
        "receiver: 100 packets in order",
    )
}

/// Spec 7.3.8 (`tests/c/example_7_3_8.c`): control, TPU and signal tasks; 100 rounds of
/// scalar flags over shared memory and signal packets.
fn example_7_3_8(provider: &str) -> Result<(), Failed> {
    run_example(
        provider,
        "example_7_3_8",
        &[
            args(&["tpu", "100"]),
            args(&["sig", "100"]),
            args(&["control", "100"]),
        ],
        "control: 100 rounds of TPU flags and signal data",
    )
}

/// Spec 7.4.3 (`tests/c/example_7_4_3.c`): a GPP has a DSP filter samples over two packet
/// channels and a scalar command channel.
fn example_7_4_3(provider: &str) -> Result<(), Failed> {
    run_example(
        provider,
        "example_7_4_3",
        &[args(&["dsp"]), args(&["gpp"])],
        "gpp: the DSP filtered 1024 samples with 5 taps correctly",
    )
}

/// Spec 7.5 (`tests/c/example_7_5.c`): a load balancer and four workers (the spec's
/// NUM_WORKERS), 50 work requests each.
fn example_7_5(provider: &str) -> Result<(), Failed> {
    const WORKERS: usize = 4;
    let mut processes: Vec<Vec<String>> = (0..WORKERS)
        .map(|w| args(&["worker", &w.to_string(), "50"]))
        .collect();
    processes.push(args(&["balancer", &WORKERS.to_string(), "50"]));
    run_example(
        provider,
        "example_7_5",
        &processes,
        "load balancer: 50 work requests to each of 4 workers",
    )
}
