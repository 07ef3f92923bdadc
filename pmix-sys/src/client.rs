//! The safe client over the raw calls.

use crate::ffi;
use crate::Error;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `PMIX_RANK_WILDCARD` (`UINT32_MAX-1`; a macro expression bindgen does not evaluate).
const RANK_WILDCARD: u32 = u32::MAX - 1;

/// A PMIx client of this process (see the crate's docs).
pub struct Client {
    me: ffi::pmix_proc_t,
    namespace: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("namespace", &self.namespace)
            .field("rank", &self.me.rank)
            .finish()
    }
}

fn check(call: &'static str, status: ffi::pmix_status_t) -> Result<(), Error> {
    if status == ffi::PMIX_SUCCESS as ffi::pmix_status_t {
        return Ok(());
    }
    // SAFETY: PMIx_Error_string returns a pointer to a static string for any status.
    let text = unsafe { CStr::from_ptr(ffi::PMIx_Error_string(status)) };
    Err(Error::Call {
        call,
        status,
        text: text.to_string_lossy().into_owned(),
    })
}

fn cstring(s: &str) -> Result<CString, Error> {
    if s.len() > ffi::PMIX_MAX_KEYLEN as usize {
        return Err(Error::BadString(s.into()));
    }
    CString::new(s).map_err(|_| Error::BadString(s.into()))
}

/// An info array whose values PMIx allocated: destructed on drop.
struct Infos(Vec<ffi::pmix_info_t>);

impl Infos {
    fn new() -> Infos {
        Infos(Vec::new())
    }

    /// Appends `key = *data` of PMIx type `ty`; PMIx copies the value (strings included).
    ///
    /// # Safety
    /// `data` points to a valid value of the C type PMIx associates with `ty`.
    unsafe fn push(&mut self, key: &[u8], data: *const c_void, ty: u32) -> Result<(), Error> {
        let mut info = ffi::pmix_info_t::default();
        // SAFETY: `key` is one of bindgen's NUL-terminated key constants (or a CString's
        // bytes), `info` is a zeroed info, and the caller vouches for `data` and `ty`.
        let status = unsafe {
            ffi::PMIx_Info_load(
                &mut info,
                key.as_ptr().cast(),
                data,
                ty as ffi::pmix_data_type_t,
            )
        };
        check("PMIx_Info_load", status)?;
        self.0.push(info);
        Ok(())
    }

    fn push_string(&mut self, key: &CStr, value: &CStr) -> Result<(), Error> {
        // SAFETY: PMIX_STRING's data is the `char *` itself, which PMIx strdup's.
        unsafe {
            self.push(
                key.to_bytes_with_nul(),
                value.as_ptr().cast(),
                ffi::PMIX_STRING,
            )
        }
    }

    fn as_ptr(&self) -> *const ffi::pmix_info_t {
        if self.0.is_empty() {
            ptr::null()
        } else {
            self.0.as_ptr()
        }
    }
}

impl Drop for Infos {
    fn drop(&mut self) {
        for info in &mut self.0 {
            // SAFETY: each value was loaded by PMIx_Info_load and is destructed once.
            unsafe { ffi::PMIx_Value_destruct(&mut info.value) };
        }
    }
}

/// The process's client: initialized by the first [`Client::process`], finalized at exit.
static PROCESS: OnceLock<Result<Client, Error>> = OnceLock::new();

extern "C" fn finalize_at_exit() {
    // SAFETY: registered only after the process client's PMIx_Init succeeded; runs once, at
    // exit, when no PMIx call of ours is in progress any more.
    _ = unsafe { ffi::PMIx_Finalize(ptr::null(), 0) };
}

impl Client {
    /// The process's client, shared by every caller and finalized when the process exits
    /// (a launcher such as Open MPI's mpirun reports a process that initialized PMIx and
    /// exited without finalizing it as failed, and kills the job).
    ///
    /// # Errors
    /// As [`Client::init`], the same error every time.
    pub fn process() -> Result<&'static Client, Error> {
        PROCESS
            .get_or_init(|| {
                let c = Client::init()?;
                // SAFETY: a plain `extern "C" fn()` with no captured state.
                if unsafe { libc::atexit(finalize_at_exit) } != 0 {
                    return Err(Error::Call {
                        call: "atexit",
                        status: -1,
                        text: "cannot register PMIx_Finalize at exit".into(),
                    });
                }
                // Never dropped (a static): the exit handler is its finalize.
                Ok(c)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Connects to the PMIx server that started this process.
    ///
    /// # Errors
    /// Not started by a PMIx server, or the server refused.
    pub fn init() -> Result<Client, Error> {
        let mut me = ffi::pmix_proc_t::default();
        // SAFETY: `me` is a valid proc to fill; no info array.
        check("PMIx_Init", unsafe {
            ffi::PMIx_Init(&mut me, ptr::null_mut(), 0)
        })?;
        // SAFETY: PMIx_Init filled the namespace, a NUL-terminated array.
        let namespace = unsafe { CStr::from_ptr(me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(Client { me, namespace })
    }

    /// The process's namespace (the job).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The process's rank in its namespace.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// The number of processes in the job.
    ///
    /// # Errors
    /// The server does not know it.
    pub fn job_size(&self) -> Result<u32, Error> {
        self.job_u32(ffi::PMIX_JOB_SIZE)
    }

    /// The number of processes of the job on this host.
    ///
    /// # Errors
    /// The server does not know it.
    pub fn local_size(&self) -> Result<u32, Error> {
        self.job_u32(ffi::PMIX_LOCAL_SIZE)
    }

    fn job_u32(&self, key: &[u8]) -> Result<u32, Error> {
        let mut job = self.me;
        job.rank = RANK_WILDCARD;
        let mut val: *mut ffi::pmix_value_t = ptr::null_mut();
        // SAFETY: `key` is a NUL-terminated constant; `val` receives an allocated value.
        check("PMIx_Get", unsafe {
            ffi::PMIx_Get(&job, key.as_ptr().cast(), ptr::null(), 0, &mut val)
        })?;
        // SAFETY: on success `val` points to a value PMIx allocated with malloc; it is read
        // as the union member its type names, then destructed and freed once.
        unsafe {
            let v = &mut *val;
            let n = match u32::from(v.type_) {
                ffi::PMIX_UINT32 => Some(v.data.uint32),
                ffi::PMIX_INT => u32::try_from(v.data.integer).ok(),
                ffi::PMIX_UINT16 => Some(u32::from(v.data.uint16)),
                _ => None,
            };
            ffi::PMIx_Value_destruct(v);
            libc::free(val.cast());
            n.ok_or(Error::Call {
                call: "PMIx_Get",
                status: 0,
                text: "unexpected value type".into(),
            })
        }
    }

    /// Publishes `key = value` in the server's default range (the launcher's session:
    /// callers put the namespace in the key). PMIx accepts a second publish of a key without
    /// complaint.
    ///
    /// No `PMIX_RANGE`: with `PMIX_RANGE_NAMESPACE`, Open MPI 4.1's data server never
    /// matches the key to a lookup (measured).
    ///
    /// # Errors
    /// A key or value PMIx cannot take, or the server refused.
    pub fn publish(&self, key: &str, value: &str) -> Result<(), Error> {
        let (key, value) = (
            cstring(key)?,
            CString::new(value).map_err(|_| Error::BadString(value.into()))?,
        );
        let mut infos = Infos::new();
        infos.push_string(&key, &value)?;
        // SAFETY: `infos` holds valid loaded infos for the duration of the call.
        check("PMIx_Publish", unsafe {
            ffi::PMIx_Publish(infos.as_ptr(), infos.0.len())
        })
    }

    /// Looks `key` up, polling until `deadline` (`None`: forever) for a process to publish
    /// it. `Ok(None)`: not published in time.
    ///
    /// Polled rather than `PMIX_WAIT`ed: Open MPI 4.1's data server ignores `PMIX_TIMEOUT`
    /// on a waiting lookup (measured: it waits forever), and a waiting lookup cannot be
    /// withdrawn when the caller gives up.
    ///
    /// # Errors
    /// A key PMIx cannot take, or a failure other than "not found".
    pub fn lookup(&self, key: &str, deadline: Option<Instant>) -> Result<Option<String>, Error> {
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(v) = self.lookup_now(key)? {
                return Ok(Some(v));
            }
            if deadline.is_some_and(|d| Instant::now() + pause > d) {
                return Ok(None);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// One lookup of `key`, not waiting; `Ok(None)`: not published (yet).
    fn lookup_now(&self, key: &str) -> Result<Option<String>, Error> {
        let ckey = cstring(key)?;
        let mut pdata = ffi::pmix_pdata_t::default();
        for (d, s) in pdata.key.iter_mut().zip(ckey.as_bytes_with_nul()) {
            *d = *s as c_char;
        }
        // SAFETY: one pdata with its key set, no info.
        let status = unsafe { ffi::PMIx_Lookup(&mut pdata, 1, ptr::null(), 0) };
        if status == ffi::PMIX_ERR_NOT_FOUND {
            return Ok(None);
        }
        check("PMIx_Lookup", status)?;
        // SAFETY: on success the value is loaded; read as the member its type names, then
        // destructed once.
        unsafe {
            let s = (u32::from(pdata.value.type_) == ffi::PMIX_STRING
                && !pdata.value.data.string.is_null())
            .then(|| {
                CStr::from_ptr(pdata.value.data.string)
                    .to_string_lossy()
                    .into_owned()
            });
            ffi::PMIx_Value_destruct(&mut pdata.value);
            Ok(s)
        }
    }

    /// Withdraws a key this process published.
    ///
    /// # Errors
    /// A key PMIx cannot take, or the server refused.
    pub fn unpublish(&self, key: &str) -> Result<(), Error> {
        let key = cstring(key)?;
        let mut keys = [key.as_ptr().cast_mut(), ptr::null_mut()];
        // SAFETY: a NULL-terminated argv of one valid string, which PMIx only reads.
        check("PMIx_Unpublish", unsafe {
            ffi::PMIx_Unpublish(keys.as_mut_ptr(), ptr::null(), 0)
        })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: paired with this client's PMIx_Init (PMIx counts them). A failure has
        // no one to report to at teardown.
        _ = unsafe { ffi::PMIx_Finalize(ptr::null(), 0) };
    }
}
