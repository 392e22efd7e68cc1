import Dispatch
import Foundation

/// What a ``Condition`` decided about an operation.
public enum ConditionResult: Sendable {
    /// The operation may execute.
    case satisfied
    /// The operation must not execute: it fails with ``BatonError/conditionFailed(operation:condition:underlying:)``
    /// carrying this error.
    case failed(any Error)
    /// The operation must not execute, and that is no error: it finishes cancelled, silently.
    case notSatisfied
}

/// What a condition is evaluated for.
public struct ConditionContext: Sendable {
    /// The operation whose gate the condition guards.
    public let operation: AsyncOperation

    /// The operation's dependencies, all finished by the time a condition is evaluated.
    public var dependencies: [Operation] { operation.dependencies }
}

/// A gate an operation must pass after its dependencies have finished and before it executes: "the
/// user is logged in", "no dependency failed", "the cache is warm".
///
/// ```swift
/// let loggedIn = Condition("logged in", producing: { _ in LogIn() }) { context in
///     Session.current.isValid ? .satisfied : .failed(LoginError.rejected)
/// }
/// try fetch.addCondition(loggedIn)
/// ```
///
/// A condition is evaluated on a thread of its own (never on a queue worker that it would block), at
/// most once per operation, and answers once: ``ConditionResult/satisfied``,
/// ``ConditionResult/failed(_:)`` (the operation fails, unexecuted) or
/// ``ConditionResult/notSatisfied`` (the operation finishes cancelled, unexecuted). When an operation
/// has several conditions they are evaluated together, and the first one that does not pass decides at
/// once; the others are abandoned.
///
/// **A produced dependency.** `producing` makes an operation that must run before the condition is
/// evaluated ("log in before fetching"). It is made and run **once per condition object**, however many
/// operations wait on the condition, on the queue of the first operation that needs it; all of them
/// wait for it. When it fails, each of them fails with its error; when it is cancelled, each finishes
/// cancelled. When every operation waiting for it leaves (cancelled, or decided by another condition)
/// before it finished, it is cancelled, and the next operation that needs it makes a new one. Make a
/// new `Condition` for a new round.
///
/// **Timeout.** A condition that has not answered after ``timeout`` (default: 60 seconds) fails the
/// operation with ``BatonError/conditionTimedOut(condition:after:)`` as the underlying error.
public final class Condition: Sendable, CustomStringConvertible {
    /// The name shown in errors, traces and the live view.
    public let name: String
    /// How long the condition may take to answer, produced dependency included.
    public let timeout: Duration
    let body: Body
    let producer: Producer?

    /// How a condition decides.
    enum Body: Sendable {
        case test(@Sendable (ConditionContext, @escaping @Sendable (ConditionResult) -> Void) -> Void)
        case asyncTest(@Sendable (ConditionContext) async -> ConditionResult)
        case all([Condition])
        case any([Condition])
        case not(Condition, failing: (any Error)?)
        case silent(Condition)
        /// Waits for a flag, for at most `timeout`; the wait (and its timer) ends with the evaluation.
        case flag(ConditionFlag, timeout: Duration)
    }

    init(name: String, timeout: Duration, producing: (@Sendable (ConditionContext) -> Operation)?, body: Body) {
        self.name = name
        self.timeout = timeout
        self.body = body
        producer = producing.map(Producer.init)
    }

    /// A condition that answers through a completion, called once from any thread.
    ///
    /// - Parameters:
    ///   - name: The name shown in errors and traces.
    ///   - timeout: How long it may take to answer; 60 seconds by default.
    ///   - producing: Makes an operation that must run first, once for all operations that wait on this
    ///     condition (see the type's documentation).
    ///   - evaluate: Decides, then calls the completion once.
    public convenience init(
        _ name: String, timeout: Duration = .seconds(60),
        producing: (@Sendable (ConditionContext) -> Operation)? = nil,
        evaluate: @escaping @Sendable (ConditionContext, @escaping @Sendable (ConditionResult) -> Void) -> Void
    ) {
        self.init(name: name, timeout: timeout, producing: producing, body: .test(evaluate))
    }

    /// A condition that answers from an `async` closure, run in a task of its own; the task is
    /// cancelled when the answer is no longer wanted.
    ///
    /// - Parameters:
    ///   - name: The name shown in errors and traces.
    ///   - timeout: How long it may take to answer; 60 seconds by default.
    ///   - producing: Makes an operation that must run first, once for all operations that wait on this
    ///     condition.
    ///   - evaluate: Decides.
    public convenience init(
        _ name: String, timeout: Duration = .seconds(60),
        producing: (@Sendable (ConditionContext) -> Operation)? = nil,
        evaluate: @escaping @Sendable (ConditionContext) async -> ConditionResult
    ) {
        self.init(name: name, timeout: timeout, producing: producing, body: .asyncTest(evaluate))
    }

    /// The name.
    public var description: String { name }
}

// MARK: - Composition and built-ins

extension Condition {
    /// Satisfied when every condition is; the first that fails (or is not satisfied) decides at once.
    /// No conditions: satisfied.
    ///
    /// - Parameters:
    ///   - conditions: The conditions, evaluated together.
    ///   - name: The name; by default the conditions' names joined with "and".
    /// - Returns: The combined condition.
    public static func all(_ conditions: [Condition], name: String? = nil) -> Condition {
        Condition(
            name: name ?? conditions.map(\.name).joined(separator: " and "), timeout: longest(conditions),
            producing: nil, body: .all(conditions))
    }

    /// Satisfied as soon as one condition is. When none is: failed with the first failure, or not
    /// satisfied when none failed. No conditions: not satisfied.
    ///
    /// - Parameters:
    ///   - conditions: The conditions, evaluated together.
    ///   - name: The name; by default the conditions' names joined with "or".
    /// - Returns: The combined condition.
    public static func any(_ conditions: [Condition], name: String? = nil) -> Condition {
        Condition(
            name: name ?? conditions.map(\.name).joined(separator: " or "), timeout: longest(conditions),
            producing: nil, body: .any(conditions))
    }

    /// Satisfied when `condition` is not (failed or not satisfied). When `condition` is satisfied, the
    /// result is a failure with `error` when one is given, otherwise not satisfied.
    ///
    /// - Parameters:
    ///   - condition: The condition to negate.
    ///   - error: The error to fail with when `condition` is satisfied; `nil` finishes the operation
    ///     cancelled instead.
    /// - Returns: The negated condition.
    public static func not(_ condition: Condition, failingWith error: (any Error)? = nil) -> Condition {
        Condition(
            name: "not \(condition.name)", timeout: condition.timeout, producing: nil,
            body: .not(condition, failing: error))
    }

    /// `condition`, with its failures turned into "not satisfied": the operation finishes cancelled,
    /// with no error.
    ///
    /// - Parameter condition: The condition.
    /// - Returns: The silent condition.
    public static func silent(_ condition: Condition) -> Condition {
        Condition(name: condition.name, timeout: condition.timeout, producing: nil, body: .silent(condition))
    }

    /// A condition decided by a synchronous test: `true` satisfies it, `false` leaves it not satisfied
    /// (the operation finishes cancelled), a thrown error fails it.
    ///
    /// - Parameters:
    ///   - name: The name shown in errors and traces.
    ///   - test: The test, run on a thread of Baton's.
    /// - Returns: The condition.
    public static func block(_ name: String, _ test: @escaping @Sendable () throws -> Bool) -> Condition {
        Condition(name) { (_: ConditionContext, answer: @escaping @Sendable (ConditionResult) -> Void) in
            do {
                answer(try test() ? .satisfied : .notSatisfied)
            } catch {
                answer(.failed(error))
            }
        }
    }

    /// Fails when a dependency failed, with ``BatonError/dependencyFailed(dependency:underlying:)``
    /// naming the first one. For operations whose ``AsyncOperation/dependencyPolicy`` lets them start
    /// after a failure (``DependencyPolicy/runRegardless``), to combine with other conditions.
    public static var noFailedDependencies: Condition {
        Condition("no failed dependencies") {
            (context: ConditionContext, answer: @escaping @Sendable (ConditionResult) -> Void) in
            for dependency in context.dependencies {
                if let baton = dependency as? AsyncOperation, case .failed(let error)? = baton.storedOutcome {
                    return answer(.failed(BatonError.dependencyFailed(dependency: baton.reference, underlying: error)))
                }
            }
            answer(.satisfied)
        }
    }

    /// Not satisfied (the operation finishes cancelled) when a dependency was cancelled.
    public static var noCancelledDependencies: Condition {
        Condition("no cancelled dependencies") {
            (context: ConditionContext, answer: @escaping @Sendable (ConditionResult) -> Void) in
            answer(context.dependencies.contains { $0.isCancelled } ? .notSatisfied : .satisfied)
        }
    }

    /// Waits until `flag` is set, for at most `timeout`; then fails with
    /// ``BatonError/conditionTimedOut(condition:after:)``.
    ///
    /// - Parameters:
    ///   - flag: The flag to wait for.
    ///   - timeout: How long to wait.
    ///   - name: The name; by default the flag's.
    /// - Returns: The condition.
    public static func waitUntil(_ flag: ConditionFlag, timeout: Duration, name: String? = nil) -> Condition {
        // The condition's own timeout is longer, so that the flag's answers.
        Condition(name: name ?? flag.name, timeout: timeout + .seconds(1), producing: nil, body: .flag(flag, timeout: timeout))
    }

    private static func longest(_ conditions: [Condition]) -> Duration {
        conditions.map(\.timeout).max() ?? .seconds(60)
    }
}

/// A `Bool` that conditions wait on without polling: ``Condition/waitUntil(_:timeout:name:)`` passes as
/// soon as it is set.
///
/// ```swift
/// let configured = ConditionFlag("configured")
/// try sync.addCondition(.waitUntil(configured, timeout: .seconds(10)))
/// // … later, from any thread:
/// configured.set()
/// ```
public final class ConditionFlag: Sendable {
    /// The name conditions on it take by default.
    public let name: String
    private let state: Mutex<FlagState>

    private struct FlagState {
        var isSet: Bool
        var waiters = WaitList<@Sendable (Bool) -> Void>()
        /// Each waiter's timeout, by its token: cancelled when the flag is set first.
        var timers: [UInt64: Deadlines.Timer] = [:]
    }

    /// A flag, set or not.
    ///
    /// - Parameters:
    ///   - name: The name shown in errors.
    ///   - isSet: Whether it starts set.
    public init(_ name: String, isSet: Bool = false) {
        self.name = name
        state = Mutex(FlagState(isSet: isSet))
    }

    /// Whether the flag is set.
    public var isSet: Bool { state.withLock { $0.isSet } }

    /// Sets the flag (or clears it, with `false`). Setting it lets every waiting condition pass.
    ///
    /// - Parameter value: The new value.
    public func set(_ value: Bool = true) {
        let (woken, timers): ([@Sendable (Bool) -> Void], [Deadlines.Timer]) = state.withLock { state in
            state.isSet = value
            guard value else { return ([], []) }
            defer { state.timers = [:] }
            return (state.waiters.takeAll().values, Array(state.timers.values))
        }
        for timer in timers { timer.cancel() }
        for wake in woken { wake(true) }
    }

    /// Calls `answer(true)` once the flag is set (now, if it is), or `answer(false)` after `timeout`,
    /// unless ``endWait(_:)`` comes first. Returns the wait's token; `nil` when it answered at once.
    @discardableResult
    func whenSet(timeout: Duration, _ answer: @escaping @Sendable (Bool) -> Void) -> UInt64? {
        let flag = self.state
        let token: UInt64? = state.withLock { state in
            guard !state.isSet else { return nil }
            let token = state.waiters.append(answer)
            // Armed under the flag's lock, so that a waiter and its timer come and go together (the
            // timers' lock is taken inside this one, never the reverse: a due timer runs off it).
            state.timers[token] = Deadlines.after(timeout) {
                let expired = flag.withLock { state in
                    state.timers[token] = nil
                    return state.waiters.remove(token)
                }
                expired?(false)
            }
            return token
        }
        guard let token else {
            answer(true)
            return nil
        }
        return token
    }

    /// Ends the wait of `token` unanswered (nobody wants the answer any more): its entry and its timer
    /// go at once.
    func endWait(_ token: UInt64) {
        let timer: Deadlines.Timer? = state.withLock { state in
            _ = state.waiters.remove(token)
            return state.timers.removeValue(forKey: token)
        }
        timer?.cancel()
    }
}
