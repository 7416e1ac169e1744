//! Rust bindings of `wit/pipeline.wit` for the host: the shared types and host interface once,
//! and each stage world reusing them.

/// The shared types and the host interface (the `host-imports` world).
pub mod imports {
    wasmtime::component::bindgen!({ world: "host-imports", path: "../wit", additional_derives: [PartialEq] });
}

/// The decompose stage's world.
pub mod decompose {
    wasmtime::component::bindgen!({
        world: "decompose-stage",
        path: "../wit",
        with: {
            "evident:pipeline/types@0.1.0": crate::plugins::bindings::imports::evident::pipeline::types,
            "evident:pipeline/host@0.1.0": crate::plugins::bindings::imports::evident::pipeline::host,
        },
    });
}

/// The verify stage's world.
pub mod verify {
    wasmtime::component::bindgen!({
        world: "verify-stage",
        path: "../wit",
        with: {
            "evident:pipeline/types@0.1.0": crate::plugins::bindings::imports::evident::pipeline::types,
            "evident:pipeline/host@0.1.0": crate::plugins::bindings::imports::evident::pipeline::host,
        },
    });
}

/// The rerank stage's world.
pub mod rerank {
    wasmtime::component::bindgen!({
        world: "rerank-stage",
        path: "../wit",
        with: {
            "evident:pipeline/types@0.1.0": crate::plugins::bindings::imports::evident::pipeline::types,
            "evident:pipeline/host@0.1.0": crate::plugins::bindings::imports::evident::pipeline::host,
        },
    });
}

/// The memory stage's world.
pub mod memory {
    wasmtime::component::bindgen!({
        world: "memory-stage",
        path: "../wit",
        with: {
            "evident:pipeline/types@0.1.0": crate::plugins::bindings::imports::evident::pipeline::types,
            "evident:pipeline/host@0.1.0": crate::plugins::bindings::imports::evident::pipeline::host,
        },
    });
}

pub use imports::HostImports;
pub use imports::evident::pipeline::host::Host as HostFunctions;
pub use imports::evident::pipeline::types;
