//! Rust bindings of the contract's versions for the host, one module per version
//! (`wit/since_v0.1.0`, `wit/since_v0.2.0`): its shared types and host imports once, and each
//! stage world reusing them. [`contract_version!`] writes one version's modules, so a new
//! version is one more line, not another set of hand-written copies.

/// The bindings of one contract version: `imports` (the host-imports world, whose host
/// functions may trap: a cancelled request or a failing host stops the stage there) and one
/// module per stage world reusing its types and imports.
macro_rules! contract_version {
    (
        path: $path:literal,
        worlds: { $($world_module:ident => $world:literal { $($interface:literal => $module:ident),* $(,)? }),* $(,)? }
    ) => {
        /// The shared types and the host imports (the `host-imports` world).
        pub mod imports {
            wasmtime::component::bindgen!({
                world: "host-imports",
                path: $path,
                additional_derives: [PartialEq],
                imports: { default: trappable },
            });
        }

        $(
            #[doc = concat!("The `", $world, "` world.")]
            pub mod $world_module {
                wasmtime::component::bindgen!({
                    world: $world,
                    path: $path,
                    with: { $($interface: super::imports::evident::pipeline::$module,)* },
                });
            }
        )*

        pub use imports::HostImports;
        pub use imports::evident::pipeline::types;
    };
}

/// `evident:pipeline@0.1.0`, frozen: one `host` interface for every stage.
pub mod v0_1 {
    contract_version! {
        path: "../wit/since_v0.1.0",
        worlds: {
            decompose => "decompose-stage" { "evident:pipeline/types@0.1.0" => types, "evident:pipeline/host@0.1.0" => host },
            verify => "verify-stage" { "evident:pipeline/types@0.1.0" => types, "evident:pipeline/host@0.1.0" => host },
            rerank => "rerank-stage" { "evident:pipeline/types@0.1.0" => types, "evident:pipeline/host@0.1.0" => host },
            memory => "memory-stage" { "evident:pipeline/types@0.1.0" => types, "evident:pipeline/host@0.1.0" => host },
        }
    }
    pub use imports::evident::pipeline::host;
}

/// `evident:pipeline@0.2.0`: the host split into capability interfaces, and the enrich stage.
pub mod v0_2 {
    contract_version! {
        path: "../wit/since_v0.2.0",
        worlds: {
            decompose => "decompose-stage" {
                "evident:pipeline/types@0.2.0" => types,
                "evident:pipeline/pages@0.2.0" => pages,
                "evident:pipeline/retrieval@0.2.0" => retrieval,
                "evident:pipeline/generation@0.2.0" => generation,
                "evident:pipeline/artifacts@0.2.0" => artifacts,
                "evident:pipeline/runtime@0.2.0" => runtime,
            },
            verify => "verify-stage" {
                "evident:pipeline/types@0.2.0" => types,
                "evident:pipeline/pages@0.2.0" => pages,
                "evident:pipeline/generation@0.2.0" => generation,
                "evident:pipeline/runtime@0.2.0" => runtime,
            },
            rerank => "rerank-stage" {
                "evident:pipeline/types@0.2.0" => types,
                "evident:pipeline/pages@0.2.0" => pages,
                "evident:pipeline/retrieval@0.2.0" => retrieval,
                "evident:pipeline/artifacts@0.2.0" => artifacts,
                "evident:pipeline/runtime@0.2.0" => runtime,
            },
            memory => "memory-stage" {
                "evident:pipeline/types@0.2.0" => types,
                "evident:pipeline/pages@0.2.0" => pages,
                "evident:pipeline/retrieval@0.2.0" => retrieval,
                "evident:pipeline/generation@0.2.0" => generation,
                "evident:pipeline/artifacts@0.2.0" => artifacts,
                "evident:pipeline/runtime@0.2.0" => runtime,
            },
            enrich => "enrich-stage" {
                "evident:pipeline/types@0.2.0" => types,
                "evident:pipeline/pages@0.2.0" => pages,
                "evident:pipeline/generation@0.2.0" => generation,
                "evident:pipeline/runtime@0.2.0" => runtime,
            },
        }
    }
    pub use imports::evident::pipeline::{artifacts, generation, pages, retrieval, runtime};
}

/// The current contract's types: what the pipeline speaks (0.1.0 stages are converted at the
/// boundary).
pub use v0_2::types;
