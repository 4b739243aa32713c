//! `trainyard-supervise`: runs one trainer for the trainyard host and kills
//! the trainer's process group when its lease deadline passes. See
//! `trainyard_host::process::supervisor`.

fn main() -> std::process::ExitCode {
    trainyard_host::process::supervisor::main()
}
