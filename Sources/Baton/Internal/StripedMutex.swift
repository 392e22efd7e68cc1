/// Locks spread over a fixed number of stripes by an object's identity, for facts kept about objects
/// that cannot hold them themselves (Foundation's operations): one object's facts are always decided
/// under the same stripe, and different objects rarely share one.
struct StripedMutex<State>: Sendable {
    private let stripes: [Mutex<State>]

    /// `count` stripes, each starting with `initialState` (which must not be empty: see `Mutex`).
    init(count: Int = 32, _ initialState: State) {
        stripes = (0..<count).map { _ in Mutex(initialState) }
    }

    /// The stripe that `object`'s facts live under.
    func stripe(for object: AnyObject) -> Mutex<State> {
        stripes[Int(UInt(bitPattern: ObjectIdentifier(object).hashValue) % UInt(stripes.count))]
    }
}
