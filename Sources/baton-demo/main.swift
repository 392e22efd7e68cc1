import Baton
import Dispatch
import Foundation

// baton-demo: audits a directory tree — every file read, checksummed and recorded — with Baton.
//
//   swift run -c release baton-demo [DIRECTORY] [--concurrency N] [--manifest FILE]
//
// The walk is a TreeOperation: one node lists a directory and recurses into its subdirectories, and
// one operation per file reads it in 1 MiB chunks and checksums it, N at a time. A live progress line
// runs on a terminal's standard error; Ctrl-C cancels cleanly and prints the summary.

// The arguments' bytes, as the system gave them (`CommandLine.arguments` decodes them lossily).
let arguments = (0..<Int(CommandLine.argc)).map { index in
    CommandLine.unsafeArgv[index].map { Array(UnsafeRawBufferPointer(start: $0, count: strlen($0))) } ?? []
}
exit(runDemo(arguments: arguments))
