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

exit(runDemo(CommandLine.arguments))
