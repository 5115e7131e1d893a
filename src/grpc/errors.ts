/**
 * Catalogue errors as gRPC errors: the catalogue's gRPC status, details "CODE: message", and the
 * code (and its parameters, as JSON) in trailing metadata — `quantd-code`, `quantd-params`.
 */
import { Metadata, type ServiceError } from '@grpc/grpc-js';
import { grpcStatusFor, isQuantdError, QuantdError } from '../errors/index.js';
import { asQuantdError } from '../http/problem.js';

export interface GrpcError extends Partial<ServiceError> {
  readonly code: number;
  readonly status: number;
  readonly details: string;
  readonly metadata: Metadata;
  readonly quantdCode: string;
}

export function errorForGrpc(err: unknown): GrpcError {
  const error: QuantdError = isQuantdError(err) ? err : asQuantdError(err);
  const metadata = new Metadata();
  metadata.set('quantd-code', error.code);
  metadata.set('quantd-params', JSON.stringify(error.toJSON().params));
  const status = grpcStatusFor(error.code);
  const details = `${error.code}: ${error.message}`;
  return {
    name: 'QuantdError',
    message: details,
    code: status,
    status,
    details,
    metadata,
    quantdCode: error.code,
  };
}
