import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import URLTaskManager

/// How one caller's task ended.
package enum Fetched: Sendable {
    /// `headers` are keyed by lowercased name.
    case response(status: Int, headers: [String: String], body: Data)
    case failure(any Error)

    package var status: Int? {
        if case .response(let status, _, _) = self { return status }
        return nil
    }

    package var text: String? {
        if case .response(_, _, let body) = self { return String(decoding: body, as: UTF8.self) }
        return nil
    }

    package var error: (any Error)? {
        if case .failure(let error) = self { return error }
        return nil
    }

    package var urlErrorCode: URLError.Code? { (error as? URLError)?.code }
    package var taskError: URLTaskError? { error as? URLTaskError }

    /// A short label for grouping a storm's results.
    package var label: String {
        switch self {
        case .response(let status, _, _): "\(status)"
        case .failure(let error as URLTaskError):
            [.reactorFailed, .authenticationFailed].contains(error.code)
                ? "\(error.code)(\(error.component?.name ?? "-"), \(error.underlying.map { "\($0)" } ?? "-"))" : "\(error)"
        case .failure(let error): "\(type(of: error)) \(error)"
        }
    }
}

extension Fetched {
    /// What a completion handler received.
    package init(data: Data?, response: URLResponse?, error: (any Error)?) {
        if let error {
            self = .failure(error)
            return
        }
        let http = response as? HTTPURLResponse
        var headers: [String: String] = [:]
        for (name, value) in http?.allHeaderFields ?? [:] {
            if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
        }
        self = .response(status: http?.statusCode ?? -1, headers: headers, body: data ?? Data())
    }
}

/// Runs `request` with async `data(for:)`.
package func fetched(_ session: URLSession, _ request: URLRequest) async -> Fetched {
    do {
        let (data, response) = try await session.data(for: request)
        return Fetched(data: data, response: response, error: nil)
    } catch {
        return .failure(error)
    }
}

/// Runs `request` with the manager's own `data(for:)` (the methods door).
package func fetched(_ manager: URLTaskManager, _ request: URLRequest) async -> Fetched {
    do {
        let (data, response) = try await manager.data(for: request)
        return Fetched(data: data, response: response, error: nil)
    } catch {
        return .failure(error)
    }
}

extension URLTaskError.Component {
    /// An interceptor as the machine tests name it.
    package static func named(_ name: String, index: Int = 0) -> Self { Self(kind: .interceptor, index: index, name: name) }
    /// A reactor as the machine tests name it.
    package static func reactorNamed(_ name: String, index: Int = 0) -> Self { Self(kind: .reactor, index: index, name: name) }
}
