//! MCAPI 2.000 over libfabric (work in progress: see the messaging issue).
