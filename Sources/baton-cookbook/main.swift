import Foundation

// baton-cookbook: crawls DRBOperationTree's cookbook API over HTTP with BatonNetwork.
//
//   python3 -m http.server --directory Sources/baton-cookbook/API 8000 &
//   swift run baton-cookbook http://127.0.0.1:8000

exit(runCookbook(CommandLine.arguments))
