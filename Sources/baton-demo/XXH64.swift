/// XXH64, the 64-bit xxHash (seed 0), fed in pieces: each piece but the last must be a multiple of 32
/// bytes (the audit reads 1 MiB chunks). Fast enough that reading, not hashing, bounds the audit.
struct XXH64 {
    private static let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
    private static let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    private static let prime3: UInt64 = 0x1656_67B1_9E37_79F9
    private static let prime4: UInt64 = 0x85EB_CA77_C2B2_AE63
    private static let prime5: UInt64 = 0x27D4_EB2F_1656_67C5

    private var lanes: (UInt64, UInt64, UInt64, UInt64) = (prime1 &+ prime2, prime2, 0, 0 &- prime1)
    private var length = 0
    private var finalized: UInt64?

    /// Hashes `bytes`; only the last piece may have a length that is not a multiple of 32.
    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        precondition(finalized == nil && length % 32 == 0, "XXH64: a piece after the last one")
        length += bytes.count
        let stripes = bytes.count / 32
        var (v1, v2, v3, v4) = lanes
        for stripe in 0..<stripes {
            let offset = stripe * 32
            v1 = Self.round(v1, bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian)
            v2 = Self.round(v2, bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self).littleEndian)
            v3 = Self.round(v3, bytes.loadUnaligned(fromByteOffset: offset + 16, as: UInt64.self).littleEndian)
            v4 = Self.round(v4, bytes.loadUnaligned(fromByteOffset: offset + 24, as: UInt64.self).littleEndian)
        }
        lanes = (v1, v2, v3, v4)
        let tail = stripes * 32
        if tail < bytes.count { finalized = finish(UnsafeRawBufferPointer(rebasing: bytes[tail...])) }
    }

    /// The hash of everything given.
    var digest: UInt64 {
        finalized ?? finish(UnsafeRawBufferPointer(start: nil, count: 0))
    }

    private func finish(_ tail: UnsafeRawBufferPointer) -> UInt64 {
        let (v1, v2, v3, v4) = lanes
        var hash: UInt64
        if length >= 32 {
            hash = v1.rotated(1) &+ v2.rotated(7) &+ v3.rotated(12) &+ v4.rotated(18)
            for lane in [v1, v2, v3, v4] {
                hash = (hash ^ Self.round(0, lane)) &* Self.prime1 &+ Self.prime4
            }
        } else {
            hash = Self.prime5
        }
        hash &+= UInt64(length)
        var offset = 0
        while offset + 8 <= tail.count {
            let word = tail.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian
            hash = (hash ^ Self.round(0, word)).rotated(27) &* Self.prime1 &+ Self.prime4
            offset += 8
        }
        if offset + 4 <= tail.count {
            let word = UInt64(tail.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian)
            hash = (hash ^ (word &* Self.prime1)).rotated(23) &* Self.prime2 &+ Self.prime3
            offset += 4
        }
        while offset < tail.count {
            hash = (hash ^ (UInt64(tail[offset]) &* Self.prime5)).rotated(11) &* Self.prime1
            offset += 1
        }
        hash ^= hash >> 33
        hash &*= Self.prime2
        hash ^= hash >> 29
        hash &*= Self.prime3
        hash ^= hash >> 32
        return hash
    }

    private static func round(_ accumulator: UInt64, _ input: UInt64) -> UInt64 {
        (accumulator &+ input &* prime2).rotated(31) &* prime1
    }
}

extension UInt64 {
    fileprivate func rotated(_ bits: UInt64) -> UInt64 {
        (self << bits) | (self >> (64 - bits))
    }
}
