//! Spec 4.1: initialization, finalization and node attributes; `mcapi_param_t` and
//! `mcapi_info_t`.

use super::{
    current_node, mcapi_domain_t, mcapi_node_t, mcapi_status_t, mcapi_uint_t, put, request,
    required, StatusOut, MCAPI_DOMAIN_INVALID, MCAPI_IMPL_VERSION, MCAPI_NODE_INVALID,
    MCAPI_ORG_ID, MCAPI_VERSION, NUMBER_OF_PORTS,
};
use crate::attributes::{
    NodeAttributes, NODE_ATTR_EAGER_MAX, NODE_ATTR_MAX_MSG_SIZE, NODE_ATTR_TYPE,
};
use crate::config::{Compat, Config, Topology};
use crate::semantics::request::MAX_REQUESTS;
use crate::semantics::Status;
use crate::Node;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Mutex, MutexGuard};

/// `MCAPI_PARAM_MAGIC`: what `mcapi_param_init` writes into `mcapi_param_t.magic`. A
/// parameter block without it (zero-filled, or a stack variable never set, as spec 7.3.8
/// passes) means "defaults", so garbage can never configure a node.
pub const MCAPI_PARAM_MAGIC: u64 = 0x4d43_4150_4950_524d; // "MCAPIPRM"
/// `MCAPI_NODE_ATTR_MAGIC`: what `mcapi_node_init_attributes` writes into
/// `mcapi_node_attributes_t.magic`; `mcapi_node_set_attribute` refuses a structure without
/// it and `mcapi_initialize` treats one without it as defaults.
pub const MCAPI_NODE_ATTR_MAGIC: u32 = 0x4d4e_4154; // "MNAT"
/// `MCAPI_MAX_RECV_BUFFERS`: the largest `mcapi_param_t.recv_buffers` (each buffer is
/// counted in slots of the node's receive pool, 64 KiB each, the eager message size).
pub const MCAPI_MAX_RECV_BUFFERS: u32 = crate::config::MAX_RECV_BUFFERS as u32;
/// `MCAPI_MAX_REQUESTS`: the largest `mcapi_param_t.request_table_size`.
pub const MCAPI_MAX_REQUESTS: u32 = MAX_REQUESTS as u32;

/// Node attribute numbers, all `mcapi_uint_t`.
const KNOWN_NODE_ATTRIBUTES: [mcapi_uint_t; 3] =
    [NODE_ATTR_TYPE, NODE_ATTR_MAX_MSG_SIZE, NODE_ATTR_EAGER_MAX];

/// `MCAPI_COMPAT_SPEC`: `mcapi_param_t.compat` for the letter of the spec.
pub const MCAPI_COMPAT_SPEC: u32 = 1;
/// `MCAPI_COMPAT_MCA`: `mcapi_param_t.compat` for the reference implementation's readings.
pub const MCAPI_COMPAT_MCA: u32 = 2;

/// `mcapi_param_t`: implementation parameters of `mcapi_initialize` (spec 3.17.5.1.1).
/// `mcapi_param_init` fills it with "no override" and the magic; the application then sets
/// the fields it wants. A zero field or empty string keeps the value from the environment
/// (`MCAPI_REQUESTS`, `MCAPI_RECV_BUFFERS`, `MCAPI_PROVIDER`, `MCAPI_JOB`,
/// `MCAPI_TOPOLOGY`) or the default.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct mcapi_param_t {
    /// [`MCAPI_PARAM_MAGIC`] when set up by `mcapi_param_init`.
    pub magic: u64,
    /// Request slots of the node (default 1024).
    pub request_table_size: mcapi_uint_t,
    /// Receive buffers of each endpoint (default 64).
    pub recv_buffers: mcapi_uint_t,
    /// libfabric provider, e.g. `"shm"`, `"tcp"`, `"verbs;ofi_rxm"` (NUL-terminated).
    pub provider: [c_char; 64],
    /// Job name: nodes of different jobs never see each other (NUL-terminated).
    pub job: [c_char; 64],
    /// Path of a topology file, lines `domain node host[:port]` (NUL-terminated).
    pub topology: [c_char; 256],
    /// [`MCAPI_COMPAT_SPEC`], [`MCAPI_COMPAT_MCA`], or 0: `MCAPI_COMPAT` or the spec.
    pub compat: mcapi_uint_t,
    /// Zero.
    pub reserved32: mcapi_uint_t,
    /// Largest message the node sends, 1..`MCAPI_MAX_MSG_SIZE`; 0:
    /// `MCAPI_MAX_MSG_SIZE` env or the ceiling.
    pub max_msg_size: u64,
    /// Largest message sent eagerly, 1..64 KiB (larger ones go by rendezvous); 0:
    /// `MCAPI_EAGER_MAX` env or the provider's measured threshold.
    pub eager_max: u64,
    /// Zero; room for parameters of later versions without changing the size.
    pub reserved: [u64; 5],
}

/// `mcapi_info_t`: what `mcapi_initialize` reports (spec 3.17.5.1.2).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct mcapi_info_t {
    /// `MCAPI_VERSION` (0x2000).
    pub mcapi_version: mcapi_uint_t,
    /// `MCAPI_ORG_ID`.
    pub organization_id: mcapi_uint_t,
    /// `MCAPI_IMPL_VERSION`.
    pub implementation_version: mcapi_uint_t,
    /// Domains in the topology file; 0 when unknown (nodes found on demand on one host).
    pub number_of_domains: mcapi_uint_t,
    /// Nodes of this node's domain in the topology file; 0 when unknown.
    pub number_of_nodes: mcapi_uint_t,
    /// Ports of the local node (`0 .. number_of_ports`).
    pub number_of_ports: mcapi_uint_t,
}

/// `mcapi_node_attributes_t` (spec 4.1.5-4.1.7).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct mcapi_node_attributes_t {
    /// [`MCAPI_NODE_ATTR_MAGIC`] when set up by `mcapi_node_init_attributes`.
    pub magic: u32,
    /// `MCAPI_NODE_ATTR_TYPE`.
    pub node_type: mcapi_uint_t,
    /// Zero; room for attributes of later versions.
    pub reserved: [u32; 6],
}

/// Nodes initialized through the C ABI. C has no value that owns a node, so this keeps
/// each one alive from `mcapi_initialize` to `mcapi_finalize`.
fn c_nodes() -> MutexGuard<'static, Vec<Node>> {
    static NODES: Mutex<Vec<Node>> = Mutex::new(Vec::new());
    NODES.lock().unwrap_or_else(|p| p.into_inner())
}

/// A NUL-terminated string field of `mcapi_param_t`: `None` if empty, `MCAPI_ERR_PARAMETER`
/// if it has no NUL or is not UTF-8.
fn param_string(field: &[c_char]) -> Result<Option<String>, Status> {
    // c_char is i8 or u8 by platform; the bytes are what C wrote either way.
    let bytes: Vec<u8> = field.iter().map(|&c| c as u8).collect();
    let text = CStr::from_bytes_until_nul(&bytes)
        .map_err(|_| Status::MCAPI_ERR_PARAMETER)?
        .to_str()
        .map_err(|_| Status::MCAPI_ERR_PARAMETER)?;
    Ok((!text.is_empty()).then(|| text.to_owned()))
}

/// The node's configuration: the environment, then what `params` overrides.
fn configure(params: Option<&mcapi_param_t>) -> Result<Config, Status> {
    crate::diagnostics::init_for_c();
    let mut config = Config::from_env().map_err(|e| {
        log::error!("initialize failed: {e}");
        Status::MCAPI_ERR_NODE_INITFAILED
    })?;
    if config.request_table_size > MAX_REQUESTS {
        log::error!(
            "initialize failed: MCAPI_REQUESTS={} is above the C ABI's {MAX_REQUESTS}",
            config.request_table_size
        );
        return Err(Status::MCAPI_ERR_NODE_INITFAILED);
    }
    let Some(p) = params.filter(|p| p.magic == MCAPI_PARAM_MAGIC) else {
        return Ok(config);
    };
    match p.request_table_size {
        0 => {}
        n if n <= MCAPI_MAX_REQUESTS => config.request_table_size = n as usize,
        _ => return Err(Status::MCAPI_ERR_PARAMETER),
    }
    match p.recv_buffers {
        0 => {}
        n if n <= MCAPI_MAX_RECV_BUFFERS => config.recv_buffers = n as usize,
        _ => return Err(Status::MCAPI_ERR_PARAMETER),
    }
    match p.compat {
        0 => {}
        MCAPI_COMPAT_SPEC => config.compat = Compat::Spec,
        MCAPI_COMPAT_MCA => config.compat = Compat::Mca,
        _ => return Err(Status::MCAPI_ERR_PARAMETER),
    }
    match p.max_msg_size {
        0 => {}
        n if n <= crate::MAX_MSG_SIZE as u64 => config.max_msg_size = n as usize,
        _ => return Err(Status::MCAPI_ERR_PARAMETER),
    }
    match p.eager_max {
        0 => {}
        n if n <= crate::node::EAGER_SLOT as u64 => config.eager_max = Some(n as usize),
        _ => return Err(Status::MCAPI_ERR_PARAMETER),
    }
    if let Some(provider) = param_string(&p.provider)? {
        config.provider = Some(provider);
    }
    if let Some(job) = param_string(&p.job)? {
        config.job = job;
    }
    if let Some(path) = param_string(&p.topology)? {
        let text = std::fs::read_to_string(&path).map_err(|_| Status::MCAPI_ERR_PARAMETER)?;
        config.topology = Some(Topology::parse(&text).map_err(|_| Status::MCAPI_ERR_PARAMETER)?);
        // A topology named in code wins over a detected launcher.
        config.bootstrap = crate::config::Bootstrap::Topology;
    }
    Ok(config)
}

/// What `mcapi_info_t` reports for a node of `domain` configured with `config`.
fn info_for(domain: u32, config: &Config) -> mcapi_info_t {
    let (domains, nodes) = match &config.topology {
        Some(t) => {
            let mut domains: Vec<u32> = t.entries().iter().map(|e| e.domain).collect();
            domains.sort_unstable();
            domains.dedup();
            let nodes = t.entries().iter().filter(|e| e.domain == domain).count();
            (domains.len() as u32, nodes as u32)
        }
        None => (0, 0),
    };
    mcapi_info_t {
        mcapi_version: MCAPI_VERSION,
        organization_id: MCAPI_ORG_ID,
        implementation_version: MCAPI_IMPL_VERSION,
        number_of_domains: domains,
        number_of_nodes: nodes,
        number_of_ports: NUMBER_OF_PORTS,
    }
}

/// `mcapi_param_init` (implementation-specific): sets every parameter to "no override" and
/// marks the block as set up, so `mcapi_initialize` reads it.
///
/// # Safety
/// `params` is NULL or points to a writable `mcapi_param_t`; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_param_init(params: *mut mcapi_param_t, status: *mut mcapi_status_t) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        required(params)?;
        let fresh = mcapi_param_t {
            magic: MCAPI_PARAM_MAGIC,
            request_table_size: 0,
            recv_buffers: 0,
            provider: [0; 64],
            job: [0; 64],
            topology: [0; 256],
            compat: 0,
            reserved32: 0,
            max_msg_size: 0,
            eager_max: 0,
            reserved: [0; 5],
        };
        // SAFETY: non-NULL and writable by the contract.
        unsafe { params.write(fresh) };
        Ok(())
    })
}

/// `mcapi_initialize` (4.1.1). NULL `node_attributes` and NULL, zero-filled or never
/// initialized `params` mean defaults; NULL `info` is allowed (nothing reported).
///
/// # Safety
/// Each pointer is NULL or valid: `node_attributes` and `params` for reading, `info` and
/// `status` for writing.
#[no_mangle]
pub unsafe extern "C" fn mcapi_initialize(
    domain_id: mcapi_domain_t,
    node_id: mcapi_node_t,
    node_attributes: *const mcapi_node_attributes_t,
    params: *const mcapi_param_t,
    info: *mut mcapi_info_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        // SAFETY: NULL or readable by the contract; read as a copy (the magic decides
        // whether the rest means anything).
        let params = unsafe { params.as_ref() }.copied();
        // SAFETY: as above.
        let node_attributes = unsafe { node_attributes.as_ref() }.copied();
        let mut attributes = NodeAttributes::default();
        if let Some(a) = node_attributes.filter(|a| a.magic == MCAPI_NODE_ATTR_MAGIC) {
            attributes
                .set(NODE_ATTR_TYPE, u64::from(a.node_type))
                .map_err(|_| Status::MCAPI_ERR_PARAMETER)?;
        }
        if Node::thread_has_node() {
            // One node per thread: the implicit node of the C calls (4.1.1).
            return Err(Status::MCAPI_ERR_NODE_INITIALIZED);
        }
        let config = configure(params.as_ref())?;
        let report = info_for(domain_id, &config);
        let node = Node::initialize_with(domain_id, node_id, attributes, config)?;
        c_nodes().push(node);
        // SAFETY: NULL or writable by the contract.
        unsafe { put(info, report) };
        Ok(())
    })
}

/// `mcapi_finalize` (4.1.2): finalizes the calling thread's node; its pending requests and
/// their receive buffers are forgotten.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_finalize(status: *mut mcapi_status_t) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        let node = current_node()?;
        // The C layer's records go first, while the ids are still this node's (once
        // `finalize` frees them another thread may initialize a node with the same ids).
        request::forget_node(node.domain_id(), node.node_id());
        node.finalize()?;
        c_nodes().retain(|n| !n.is(&node));
        Ok(())
    })
}

/// `mcapi_domain_id_get` (4.1.3): `MCAPI_DOMAIN_INVALID` on error.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_domain_id_get(status: *mut mcapi_status_t) -> mcapi_domain_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(MCAPI_DOMAIN_INVALID, || Ok(current_node()?.domain_id()))
}

/// `mcapi_node_id_get` (4.1.4): `MCAPI_NODE_INVALID` on error.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_node_id_get(status: *mut mcapi_status_t) -> mcapi_node_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(MCAPI_NODE_INVALID, || Ok(current_node()?.node_id()))
}

/// `mcapi_node_init_attributes` (4.1.5): every attribute at its default.
///
/// # Safety
/// `node_attributes` is NULL or writable; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_node_init_attributes(
    node_attributes: *mut mcapi_node_attributes_t,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        required(node_attributes)?;
        let defaults = NodeAttributes::default();
        let fresh = mcapi_node_attributes_t {
            magic: MCAPI_NODE_ATTR_MAGIC,
            node_type: defaults.get(NODE_ATTR_TYPE)? as u32,
            reserved: [0; 6],
        };
        // SAFETY: non-NULL and writable by the contract.
        unsafe { node_attributes.write(fresh) };
        Ok(())
    })
}

/// `mcapi_node_set_attribute` (4.1.6). `MCAPI_ERR_PARAMETER` for a structure that
/// `mcapi_node_init_attributes` did not set up.
///
/// # Safety
/// `node_attributes` is NULL or valid for reading and writing; `attribute` is NULL or
/// readable for `attribute_size` bytes; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_node_set_attribute(
    node_attributes: *mut mcapi_node_attributes_t,
    attribute_num: mcapi_uint_t,
    attribute: *const c_void,
    attribute_size: usize,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        required(attribute)?;
        // SAFETY: NULL or valid for reading and writing by the contract.
        let target = unsafe { node_attributes.as_mut() }
            .filter(|a| a.magic == MCAPI_NODE_ATTR_MAGIC)
            .ok_or(Status::MCAPI_ERR_PARAMETER)?;
        if !KNOWN_NODE_ATTRIBUTES.contains(&attribute_num) {
            return Err(Status::MCAPI_ERR_ATTR_NUM);
        }
        if attribute_size != size_of::<mcapi_uint_t>() {
            return Err(Status::MCAPI_ERR_ATTR_SIZE);
        }
        if attribute_num != NODE_ATTR_TYPE {
            // The running node's values: configured by parameters, never by attributes.
            return Err(Status::MCAPI_ERR_ATTR_READONLY);
        }
        // SAFETY: non-NULL, readable for `attribute_size` (= 4) bytes by the contract;
        // read unaligned because C may point into a byte buffer.
        let value = unsafe { attribute.cast::<mcapi_uint_t>().read_unaligned() };
        let mut checked = NodeAttributes::default();
        checked.set(attribute_num, u64::from(value))?;
        target.node_type = value;
        Ok(())
    })
}

/// `mcapi_node_get_attribute` (4.1.7) of this or another node.
///
/// # Safety
/// `attribute` is NULL or writable for `attribute_size` bytes; `status` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_node_get_attribute(
    domain_id: mcapi_domain_t,
    node_id: mcapi_node_t,
    attribute_num: mcapi_uint_t,
    attribute: *mut c_void,
    attribute_size: usize,
    status: *mut mcapi_status_t,
) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        required(attribute)?;
        if KNOWN_NODE_ATTRIBUTES.contains(&attribute_num)
            && attribute_size != size_of::<mcapi_uint_t>()
        {
            return Err(Status::MCAPI_ERR_ATTR_SIZE);
        }
        let value = current_node()?.node_get_attribute(domain_id, node_id, attribute_num)?;
        let value = mcapi_uint_t::try_from(value).map_err(|_| Status::MCAPI_ERR_GENERAL)?;
        // SAFETY: non-NULL, writable for `attribute_size` (= 4) bytes by the contract.
        unsafe { attribute.cast::<mcapi_uint_t>().write_unaligned(value) };
        Ok(())
    })
}

/// `mcapi_ext_launcher_rank` (an extension, not MCAPI 2.000): this process's rank under a
/// PMIx launcher (mpirun, `srun --mpi=pmix`), e.g. to use as its node id. Not under a
/// launcher, or built without PMIx: 0 and `MCAPI_ERR_GENERAL`.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_ext_launcher_rank(status: *mut mcapi_status_t) -> mcapi_uint_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(0, || {
        crate::launcher::rank().ok_or(Status::MCAPI_ERR_GENERAL)
    })
}

/// `mcapi_ext_launcher_size` (an extension, not MCAPI 2.000): the number of processes the
/// launcher started; as [`mcapi_ext_launcher_rank`] otherwise.
///
/// # Safety
/// `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_ext_launcher_size(status: *mut mcapi_status_t) -> mcapi_uint_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call(0, || {
        crate::launcher::size().ok_or(Status::MCAPI_ERR_GENERAL)
    })
}
