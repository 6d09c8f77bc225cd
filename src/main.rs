use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    leadgate::cli::main().await
}
