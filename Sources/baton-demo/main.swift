import Baton
import Dispatch
import Foundation

// baton-demo: audits a directory tree — every file read, checksummed and recorded — with Baton.
//
//   swift run baton-demo [DIRECTORY] [--concurrency N]
//
// The walk is a TreeOperation (one node recurses into subdirectories); each directory's files go
// through a group of bounded concurrency, one chain per file: read → checksum → record. A live
// progress line runs on standard error; Ctrl-C cancels cleanly and reports what finished.

exit(runDemo(CommandLine.arguments))
