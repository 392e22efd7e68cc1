import Dispatch
import Foundation

#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// SplitMix64: a tiny deterministic generator, so that a seed replays the same workload shape.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform value in 0..<1 from the top 53 bits.
    mutating func unit() -> Double { Double(next() >> 11) / 9_007_199_254_740_992.0 }

    mutating func chance(_ probability: Double) -> Bool { unit() < probability }

    mutating func int(_ range: ClosedRange<Int>) -> Int {
        let width = UInt64(range.upperBound - range.lowerBound) + 1
        return range.lowerBound + Int(next() % width)
    }

    mutating func double(_ range: ClosedRange<Double>) -> Double {
        range.lowerBound + unit() * (range.upperBound - range.lowerBound)
    }

    /// The seed of batch `index`, derived from the run's seed.
    static func batchSeed(run seed: UInt64, batch index: Int) -> UInt64 {
        var generator = SplitMix64(seed: seed ^ (UInt64(truncatingIfNeeded: index) &* 0xD1B5_4A32_D192_ED03))
        return generator.next()
    }
}

/// A value behind a lock of our own (an executable may use NSLock freely).
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

/// A monotonic clock in seconds.
func now() -> Double {
    Double(DispatchTime.now().uptimeNanoseconds) / 1e9
}

/// Resident memory of this process in bytes; 0 where it is not measured.
enum ResidentMemory {
    static var isMeasured: Bool {
        #if os(Linux) || canImport(Darwin)
        return true
        #else
        return false
        #endif
    }

    static func bytes() -> UInt64 {
        #if os(Linux)
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = UInt64(fields[1]) else { return 0 }
        return pages * UInt64(max(0, sysconf(Int32(_SC_PAGESIZE))))
        #elseif canImport(Darwin)
        var info = mach_task_basic_info()
        var count = mach_msg_type_number_t(MemoryLayout<mach_task_basic_info>.size / MemoryLayout<natural_t>.size)
        let result = withUnsafeMutablePointer(to: &info) { pointer in
            pointer.withMemoryRebound(to: integer_t.self, capacity: Int(count)) {
                task_info(machTaskSelf, task_flavor_t(MACH_TASK_BASIC_INFO), $0, &count)
            }
        }
        return result == KERN_SUCCESS ? UInt64(info.resident_size) : 0
        #else
        return 0
        #endif
    }

    static func mebibytes(_ bytes: UInt64) -> Double { Double(bytes) / 1_048_576 }
}

#if canImport(Darwin) && !os(Linux)
/// The task port, fetched once (`mach_task_self_` is a C global that Swift 6 will not read freely).
private let machTaskSelf: mach_port_t = task_self_trap()
#endif
