/// A shared resource that operations claim: at most ``ExclusivityScope/limit(of:)`` operations holding
/// it execute at a time (one unless you set a limit).
///
/// Name it with a string or a type; categories with the same name in the same scope are the same
/// category.
///
/// ```swift
/// let writer = SaveRecords()
/// try writer.addExclusivity("database")        // one database writer at a time
/// try download.addExclusivity(OperationCategory("downloads", in: networking))
/// ```
public struct OperationCategory: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The category's name.
    public var name: String { laneName.category }
    /// The scope whose limits and lines the category belongs to.
    public let scope: ExclusivityScope

    /// A category named `name` in `scope` (the process-wide one unless given).
    ///
    /// - Parameters:
    ///   - name: The name; an empty name is refused when an operation claims it.
    ///   - scope: The scope; the process-wide ``ExclusivityScope/process`` by default.
    public init(_ name: String, in scope: ExclusivityScope = .process) {
        self.scope = scope
        topLanes = [Lane(name: Lane.Name(scope: ObjectIdentifier(scope), category: name), under: 0)]
    }

    /// A category named after a type (its fully qualified name), such as a model or a store.
    ///
    /// - Parameters:
    ///   - type: The type.
    ///   - scope: The scope; the process-wide ``ExclusivityScope/process`` by default.
    public init(_ type: Any.Type, in scope: ExclusivityScope = .process) {
        self.init(String(reflecting: type), in: scope)
    }

    /// A category in the process-wide scope, written as a string literal.
    ///
    /// - Parameter value: The name.
    public init(stringLiteral value: String) {
        self.init(value)
    }

    /// The name, quoted, and the scope when it is not the process-wide one.
    public var description: String {
        scope === ExclusivityScope.process ? "'\(name)'" : "'\(name)' in \(scope.name)"
    }

    /// Categories are equal when they have the same name in the same scope.
    public static func == (lhs: OperationCategory, rhs: OperationCategory) -> Bool { lhs.laneName == rhs.laneName }

    /// Hashes the name and the scope's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(laneName) }

    /// The name and scope as the claim table knows them (hashed once).
    var laneName: Lane.Name { topLanes[0].name }
    /// The lanes of a claim of this category alone, outside any composite that holds something: made
    /// once with the category and shared by every claim of it (a list made and freed per claim was
    /// about 700 instructions of an uncontended claim, callgrind). It also keeps the name: a category
    /// is two references (this list and its scope), so a copy retains two objects, not four.
    let topLanes: [Lane]
}

/// A namespace of categories with their own limits: a subsystem keeps its categories apart from the
/// process-wide default, so a "database" of one library never excludes another's.
///
/// ```swift
/// let networking = ExclusivityScope("networking")
/// try networking.setLimit(4, for: "downloads")     // four downloads at a time
/// try download.addExclusivity(OperationCategory("downloads", in: networking))
/// ```
///
/// Every scope's claims are decided under one lock, so an operation may claim categories of several
/// scopes and still gets all of them at once or none.
public final class ExclusivityScope: Sendable, Hashable, CustomStringConvertible {
    /// The process-wide scope, used by categories that name no other.
    public static let process = ExclusivityScope("process")

    /// The scope's name, shown in messages.
    public let name: String
    private let settings = Mutex(Settings())

    private struct Settings {
        var slowWait: Duration?
    }

    /// A scope named `name` (names need not be unique; scopes are told apart by identity).
    ///
    /// - Parameter name: The name shown in messages.
    public init(_ name: String) {
        self.name = name
    }

    deinit {
        // Limits are kept by the scope's identity, which a scope made later may take over. The table's
        // lock is free here: the table keeps no scope, and nothing lets go of an operation's last
        // reference under that lock (each caller is a method of the operation it gives back, and a
        // composite's kept hold, given back for another operation, is released off the lock: see
        // `ClaimTable.letGo`).
        Gatekeeper.forgetLimits(of: ObjectIdentifier(self))
    }

    /// Lets `limit` operations hold `category` at once (throttling; exclusivity is a limit of 1).
    ///
    /// Raising a limit lets waiting operations through at once; lowering it lets holders finish and
    /// admits new ones only when the count is below the new limit.
    ///
    /// - Parameters:
    ///   - limit: How many may hold it at once; at least 1.
    ///   - category: The category's name in this scope.
    /// - Throws: ``BatonError/invalidLimit(category:limit:)`` when `limit` is below 1 or the name is
    ///   empty.
    public func setLimit(_ limit: Int, for category: String) throws(BatonError) {
        guard limit >= 1, !category.isEmpty else {
            throw .invalidLimit(category: OperationCategory(category, in: self).description, limit: limit)
        }
        Gatekeeper.setLimit(limit, of: Lane.Name(scope: ObjectIdentifier(self), category: category))
    }

    /// How many operations may hold `category` at once.
    ///
    /// - Parameter category: The category's name in this scope.
    /// - Returns: The limit (1 unless set).
    public func limit(of category: String) -> Int {
        Gatekeeper.limit(of: Lane.Name(scope: ObjectIdentifier(self), category: category))
    }

    /// Lets at most `count` operations holding `category` start in any window of `interval`: a rate,
    /// such as "ten requests a second". It counts grants (an operation starts holding the category);
    /// how many may hold it at once is still its limit (1 unless set), so a rate of ten a second for
    /// work that may overlap usually comes with a limit of ten too.
    ///
    /// ```swift
    /// let api = ExclusivityScope("api")
    /// try api.setLimit(10, for: "search")
    /// try api.setRate(10, per: .seconds(1), for: "search")
    /// ```
    ///
    /// An operation kept back by the rate waits in the category's line like one kept back by the
    /// limit: without a worker, first come first served, and its cancellation takes it out at once. A
    /// composite that holds the category lends it to its children, which then share the composite's
    /// grant and are paced among themselves at the same rate. Changing the rate keeps the most recent
    /// grants that fit the new one.
    ///
    /// - Parameters:
    ///   - count: How many may start in any window; at least 1.
    ///   - interval: The window; above zero (a window beyond about a century is taken as a century,
    ///     one below a nanosecond as a nanosecond).
    ///   - category: The category's name in this scope.
    /// - Throws: ``BatonError/invalidRate(category:count:interval:)`` when `count` is below 1,
    ///   `interval` is not above zero, or the name is empty.
    public func setRate(_ count: Int, per interval: Duration, for category: String) throws(BatonError) {
        guard count >= 1, interval > .zero, !category.isEmpty else {
            throw .invalidRate(category: OperationCategory(category, in: self).description, count: count, interval: interval)
        }
        Gatekeeper.setPace(
            Pace(count: count, interval: interval.clampedNanoseconds),
            of: Lane.Name(scope: ObjectIdentifier(self), category: category))
    }

    /// Takes the rate of `category` away: its operations start as fast as its limit lets them.
    ///
    /// - Parameter category: The category's name in this scope.
    public func removeRate(for category: String) {
        Gatekeeper.setPace(nil, of: Lane.Name(scope: ObjectIdentifier(self), category: category))
    }

    /// The rate of `category`, if it has one (see ``setRate(_:per:for:)``).
    ///
    /// - Parameter category: The category's name in this scope.
    /// - Returns: How many may start in any window, and the window.
    public func rate(of category: String) -> (count: Int, interval: Duration)? {
        Gatekeeper.pace(of: Lane.Name(scope: ObjectIdentifier(self), category: category)).map { ($0.count, $0.window) }
    }

    /// When set, an operation that has waited for a category of this scope longer than this is
    /// reported to ``Diagnostics`` (``Diagnostic/Kind/waitedLongForCategory``), once per wait. `nil`
    /// (the default) reports nothing.
    public var slowWaitThreshold: Duration? {
        get { settings.withLock { $0.slowWait } }
        set { settings.withLock { $0.slowWait = newValue } }
    }

    /// Scopes are equal when they are the same object.
    public static func == (lhs: ExclusivityScope, rhs: ExclusivityScope) -> Bool { lhs === rhs }

    /// Hashes the scope's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }

    /// The scope's name.
    public var description: String { name }
}
