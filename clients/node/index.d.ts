import { EventEmitter } from 'node:events';
import type { ConnectionOptions } from 'node:tls';

export const PAYLOAD_BYTES_MAX: number;
export const RECONNECT_INTERVAL_MAX_MS: number;
export const DURATION_MS_MAX: number;

export const Op: Readonly<Record<string, number>>;
export const Status: Readonly<{ OK: number; ERROR: number; EMPTY: number; NOT_LEADER: number }>;

export class FrameError extends Error {}

export function encodeFrame(code: number, payload?: string | Uint8Array): Buffer;

export class FrameDecoder {
  push(chunk: Buffer): Array<{ code: number; payload: Buffer }>;
}

export type ErrorCode =
  | 'AUTH_ERROR'
  | 'SERVER_ERROR'
  | 'NOT_LEADER'
  | 'SUBSCRIBE_ERROR'
  | 'TIMEOUT'
  | 'CONNECTION_CLOSED'
  | 'NOT_CONNECTED'
  | 'PROTOCOL_ERROR';

export class BoltQError extends Error {
  code: ErrorCode;
  /** With NOT_LEADER: what the server knows of the leader. */
  leader?: string;
  leaderId?: string;
}

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface Message {
  id: string;
  topic: string;
  /** The JSON value published (an object stays an object). */
  payload: Json;
  headers?: Record<string, string>;
  /** Publish time in ns since the epoch (a JSON number: exact to about 1 µs). */
  timestamp: number;
  retry: number;
}

export interface Push extends Message {
  subscriber_id: string;
}

export interface PublishReply {
  id: string;
  topic: string;
  /** In confirm mode. */
  seq_no?: number;
  ack?: boolean;
}

export interface ClientOptions {
  apiKey?: string;
  /** Per request, ms. Default 30000. */
  timeout?: number;
  /** Default true. */
  autoReconnect?: boolean;
  /** ms before the first reconnect, doubling while reconnects fail. Default 2000. */
  reconnectInterval?: number;
  tls?: boolean | ConnectionOptions;
}

export interface DeadLetterQueue {
  queue: string;
  dead_letter: string;
  count: number;
}

export class BoltQClient extends EventEmitter {
  constructor(host?: string, port?: number, options?: ClientOptions);
  readonly connected: boolean;
  connect(): Promise<void>;
  close(): Promise<void>;

  /** `delay` and `ttl` in milliseconds. */
  publish(
    topic: string,
    payload: Json,
    headers?: Record<string, string>,
    options?: { delay?: number; ttl?: number; priority?: number },
  ): Promise<PublishReply>;
  publishTopic(
    topic: string,
    payload: Json,
    headers?: Record<string, string>,
    options?: { priority?: number },
  ): Promise<PublishReply>;
  consume(topic: string): Promise<Message | null>;
  consumeWait(topic: string, options?: { waitMs?: number; max?: number }): Promise<Message[]>;
  ack(id: string): Promise<{ status: 'acked' }>;
  nack(id: string): Promise<{ status: 'nacked' }>;
  /** BoltQ servers only: several ids (1..=1000) in one request. */
  ackMany(ids: string[]): Promise<{ status: 'acked'; count: number; failed?: { id: string; error: string }[] }>;
  nackMany(ids: string[]): Promise<{ status: 'nacked'; count: number; failed?: { id: string; error: string }[] }>;
  setPrefetch(count: number): Promise<{ status: 'ok' }>;
  enableConfirm(): Promise<{ status: 'ok' }>;
  ping(): Promise<{ status: 'pong' }>;
  health(): Promise<boolean>;
  stats(): Promise<Record<string, unknown>>;

  subscribe(
    topic: string,
    id: string,
    /** `ack`: durable only; pushes count as received once `ack(message.id)` names them. */
    options?: { durable?: boolean; ack?: boolean },
    onMessage?: (message: Push) => void,
  ): Promise<{ status: 'subscribed' }>;

  exchangeDeclare(name: string, type?: 'direct' | 'fanout' | 'topic' | 'headers', durable?: boolean): Promise<{ status: 'ok' }>;
  exchangeDelete(name: string): Promise<{ status: 'ok' }>;
  bindQueue(
    exchange: string,
    queue: string,
    bindingKey?: string,
    options?: { headers?: Record<string, string> | null; matchAll?: boolean },
  ): Promise<{ status: 'ok' }>;
  unbindQueue(exchange: string, queue: string, bindingKey?: string): Promise<{ status: 'ok' }>;
  publishToExchange(
    exchange: string,
    routingKey: string,
    payload: Json,
    headers?: Record<string, string>,
    options?: { priority?: number },
  ): Promise<PublishReply>;

  dlqList(queue?: string): Promise<DeadLetterQueue[]>;
  dlqRead(queue: string, options?: { offset?: number; limit?: number }): Promise<{ queue: string; offset: number; messages: Message[]; next_offset: number }>;
  dlqRequeue(queue: string, options?: { limit?: number }): Promise<number>;
  dlqPurge(queue: string): Promise<number>;

  on(event: 'message' | `message:${string}`, listener: (message: Push) => void): this;
  on(event: 'disconnect' | 'reconnect', listener: () => void): this;
  on(event: 'reconnectError' | 'error', listener: (error: BoltQError) => void): this;
}

export default BoltQClient;
