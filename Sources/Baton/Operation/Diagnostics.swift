import Foundation

/// Where Baton sends ``Diagnostic`` reports.
///
/// Replace the handler to route reports into your logging, or to collect them in tests:
///
/// ```swift
/// Diagnostics.handler = { diagnostic in logger.warning("\(diagnostic)") }
/// ```
public enum Diagnostics {
    /// The handler is kept inside a struct, and the struct (never the bare function) is what passes
    /// through the generic `withLock`: a function passed through a generic is re-wrapped in a
    /// conversion thunk, and a handler read and stored back would pile the layers up until calling it
    /// overflowed the stack.
    private struct Handler {
        let body: @Sendable (Diagnostic) -> Void
    }

    private static let storage = Mutex(Handler(body: Diagnostics.defaultHandler))

    /// The function that receives every report. The default prints one line in debug builds and does
    /// nothing in release builds.
    public static var handler: @Sendable (Diagnostic) -> Void {
        get { storage.withLock { $0 }.body }
        set { storage.withLock { $0 = Handler(body: newValue) } }
    }

    /// The default handler: one line on standard error in debug builds, silence in release builds.
    public static let defaultHandler: @Sendable (Diagnostic) -> Void = { diagnostic in
        #if DEBUG
        FileHandle.standardError.write(Data("\(diagnostic)\n".utf8))
        #endif
    }

    static func report(_ kind: Diagnostic.Kind, _ operation: Operation) {
        let diagnostic = Diagnostic(kind: kind, operation: operation)
        handler(diagnostic)
    }
}
