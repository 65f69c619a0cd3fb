"""The emulated fabric: datapath plan, build and teardown, state, faults, namespaces."""
