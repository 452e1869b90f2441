import Foundation

/// One accepted TCP connection, served on its own thread: read a request, record it, run the
/// handler, write the response, and repeat while the connection is kept alive.
struct Connection {
    private static let threadKey = "LoopbackServer.connection"

    let id: Int
    let fd: Int32
    let core: ServerCore

    /// Serves connection `id` on a new thread; the thread closes the socket when it is done.
    static func start(id: Int, fd: Int32, core: ServerCore) {
        let thread = Thread {
            Thread.current.threadDictionary[threadKey] = "\(ObjectIdentifier(core).hashValue):\(id)"
            Connection(id: id, fd: fd, core: core).run()
        }
        thread.name = "LoopbackServer.connection.\(core.port).\(id)"
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// The connection ID served by the calling thread, if it is one of `core`'s connection threads.
    static func currentID(on core: ServerCore) -> Int? {
        guard let tag = Thread.current.threadDictionary[threadKey] as? String else { return nil }
        let parts = tag.split(separator: ":")
        guard parts.count == 2, parts[0] == "\(ObjectIdentifier(core).hashValue)" else { return nil }
        return Int(parts[1])
    }

    private func run() {
        defer { core.registry.close(id) }
        Socket.setNoDelay(fd)
        let reader = SocketReader(fd: fd)
        let configuration = core.configuration
        while !core.registry.isStopped {
            let head: RequestHead
            do {
                guard let lines = try reader.readHead(limit: configuration.maxHeadBytes) else { return }
                head = try RequestHead(lines: lines)
            } catch LoopbackServerError.malformedMessage(let reason) {
                reject(status: 400, reason: reason)
                return
            } catch {
                return
            }
            guard let request = readBody(of: head, from: reader) else { return }

            core.registry.setInHandler(id, true)
            let handler = core.routes.handler(method: request.method, path: request.path)
            let response = handler?(request) ?? .text("No route for \(request.method) \(request.path)\n", status: 404)
            core.registry.setInHandler(id, false)
            if core.registry.isStopped { return }

            if let delay = response.delay, !core.registry.sleep(for: delay) { return }
            let keepAlive = !head.wantsClose && !response.closeConnection
            var writer = ResponseWriter(fd: fd, registry: core.registry)
            do {
                try writer.send(response, method: request.method, keepAlive: keepAlive)
                response.onSent?(ServerResponse.SendOutcome(bodyBytesSent: writer.bodyBytesSent, completed: true))
            } catch is ResponseWriter.Dropped {
                switch response.dropStyle {
                case .reset: Socket.setLingerZero(fd)
                case .close: Socket.shutdownWrite(fd)
                }
                response.onSent?(ServerResponse.SendOutcome(bodyBytesSent: writer.bodyBytesSent, completed: false))
                return
            } catch {
                response.onSent?(ServerResponse.SendOutcome(bodyBytesSent: writer.bodyBytesSent, completed: false))
                return
            }
            if !keepAlive {
                Socket.shutdownWrite(fd)
                return
            }
        }
    }

    /// Reads the body (answering `Expect: 100-continue` first) and records the request; nil ends the connection.
    private func readBody(of head: RequestHead, from reader: SocketReader) -> RecordedRequest? {
        var body = BodyAccumulator(limit: core.configuration.bodyRecordLimit)
        do {
            let length = try head.contentLength()
            let chunked = head.isChunked
            if head.expectsContinue && (chunked || (length ?? 0) > 0) {
                try Array("HTTP/1.1 100 Continue\r\n\r\n".utf8).withUnsafeBytes { try Socket.sendAll(fd, $0) }
            }
            if chunked {
                _ = try reader.readChunked(lineLimit: core.configuration.maxHeadBytes) { body.consume($0) }
            } else if let length {
                try reader.readExactly(length) { body.consume($0) }
            }
        } catch LoopbackServerError.malformedMessage(let reason) {
            reject(status: 400, reason: reason)
            return nil
        } catch {
            return nil
        }
        let finished = body
        return core.log.append { sequence in
            RecordedRequest(
                method: head.method,
                target: head.target,
                version: head.version,
                headers: head.headers,
                body: finished.data,
                bodyLength: finished.length,
                bodySHA256: finished.sha256,
                wasChunked: head.isChunked,
                connectionID: id,
                sequence: sequence,
                arrivedAt: .now
            )
        }
    }

    /// Answers a request the server could not parse, then the caller closes the connection.
    private func reject(status: Int, reason: String) {
        var writer = ResponseWriter(fd: fd, registry: core.registry)
        try? writer.send(.text("\(reason)\n", status: status), method: "GET", keepAlive: false)
        Socket.shutdownWrite(fd)
    }
}
