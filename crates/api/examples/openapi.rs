//! Prints the OpenAPI document of the v1 API: `cargo run -p sluice-api --example openapi > docs/openapi.json`.

fn main() {
    print!("{}", sluice_api::openapi_json());
}
