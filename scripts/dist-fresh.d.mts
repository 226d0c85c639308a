export declare const CHECKOUT: string;
export declare function distStaleReason(root?: string): string | undefined;
